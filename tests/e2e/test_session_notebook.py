"""A notebook session end to end, in Chromium: start it, open it from the dashboard, run a cell, stop it.

`gpufleet serve` with sign-in on a simulated fleet of one GPU. A member
starts a `--jupyter` session with the CLI; the worker starts its Jupyter
server; the member opens it from the Sessions page (on the notebooks' own
origin, `serve`'s second port) and runs a cell (over the kernel's WebSocket, from the notebook's own page:
this machine has jupyter_server without a notebook front end) that prints
the visible-device variable. Another member and a request without sign-in
get 403 on the same URL, under the notebook's own host name. `session stop` frees the GPU, and the training
that waited for it starts.
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
import socket
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from gpufleet.api.proxy.place import loopback_host
from gpufleet.config import load_settings
from gpufleet.db.interactive import TrainingSession
from gpufleet.db.session import session_scope
from support.people import context_sign_in
from support.servers import ServedProcess, cli, make_token, serve_process, wait_served
from support.unix import short_name, unix_account

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ONE_GPU = {"GPUFLEET_SIMULATE": "1xH100-80GB", "GPUFLEET_AUTH": "on"}

# Runs one cell on a new kernel of the notebook this page is in, as JupyterLab's own scripts call it (the
# page's token from its page config, on every call and on the WebSocket's URL), and shows what it printed.
RUN_CELL = """async (code) => {
  const config = JSON.parse(document.getElementById('jupyter-config-data').textContent);
  const base = config.baseUrl, key = config.token;
  const made = await fetch(base + 'api/kernels', {method: 'POST', body: '{}',
    headers: {'Content-Type': 'application/json', 'Authorization': `token ${key}`}});
  if (!made.ok) return `kernel refused: ${made.status}`;
  const kernel = await made.json();
  const ws = new WebSocket(location.origin.replace(/^http/, 'ws') + base
                           + `api/kernels/${kernel.id}/channels?token=${key}`);
  const msgId = crypto.randomUUID();
  const printed = await new Promise((resolve, reject) => {
    let out = '';
    ws.onerror = () => reject(new Error('the kernel socket failed'));
    ws.onopen = () => ws.send(JSON.stringify({
      header: {msg_id: msgId, msg_type: 'execute_request', username: '', session: crypto.randomUUID(), version: '5.3',
               date: new Date().toISOString()},
      parent_header: {}, metadata: {}, channel: 'shell', buffers: [],
      content: {code, silent: false, store_history: false, user_expressions: {}, allow_stdin: false,
                stop_on_error: true},
    }));
    ws.onmessage = (e) => {
      const m = JSON.parse(e.data);
      if (m.parent_header?.msg_id !== msgId) return;
      if (m.header.msg_type === 'stream') out += m.content.text;
      if (m.header.msg_type === 'error') out += m.content.ename + ': ' + m.content.evalue;
      if (m.header.msg_type === 'status' && m.content.execution_state === 'idle') resolve(out);
    };
  });
  ws.close();
  const pre = document.createElement('pre');
  pre.id = 'cell-output';
  pre.textContent = `In [1]: ${code}\\n${printed}`;
  pre.style.cssText = 'font-size:18px;padding:1rem;border:2px solid #4a8;margin:1rem';
  document.body.prepend(pre);
  return printed;
}"""


@pytest.fixture
def fleet(dashboard_built: Path) -> Iterator[tuple[ServedProcess, dict[str, str], dict[str, str]]]:
    """The server, and tokens of two members who each have a Unix account of their name (the session runs as it)."""
    # A data dir every account may enter: the session's process runs as its owner.
    root = Path(tempfile.mkdtemp(prefix="gpufleet-nb-", dir="/tmp"))
    root.chmod(0o755)
    env = {**ONE_GPU, "GPUFLEET_SECRET_KEY": secrets.token_urlsafe(32)}
    names = {"alice": short_name("nba"), "bob": short_name("nbb")}
    try:
        with unix_account(names["alice"]), unix_account(names["bob"]):
            tokens = {}
            for key, name in names.items():
                tokens[key] = make_token(root / "data", name, "member", **env)
                for permission in ("run_code", "non_preemptible"):
                    cli(root / "data", "users", "grant", name, permission, **env)
            with serve_process(root / "data", **env) as srv:
                yield srv, tokens, env
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _notebook_token(srv: ServedProcess, sid: str) -> str:
    with session_scope(load_settings(data_dir=srv.data_dir)) as sess:
        token = sess.get(TrainingSession, uuid.UUID(sid)).token
    assert token
    return token


def _signed_in(browser, srv: ServedProcess, token: str):
    ctx = browser.new_context(base_url=srv.url, viewport={"width": 1280, "height": 800})
    ctx.page_key = context_sign_in(ctx, srv.url, token)  # for the test's own requests as the dashboard's page
    return ctx


def test_a_member_opens_her_notebook_from_the_dashboard_and_others_cannot(browser, fleet, screenshots: Path) -> None:
    srv, tokens, env = fleet
    alice = httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {tokens['alice']}"}, timeout=60)
    as_alice = {**env, "GPUFLEET_SERVER": srv.url, "GPUFLEET_TOKEN": tokens["alice"]}
    started = json.loads(cli(srv.data_dir, "session", "start", "--gpus", "1", "--jupyter", "--json", **as_alice))
    sid = started["id"]
    running = wait_served("the session running",
                          lambda: (s := alice.get(f"/api/v1/sessions/{sid}").json())["status"] == "running"
                          and s["url"] and s, srv)
    url, gpu = running["url"], running["gpu_ids"]
    assert url == f"/sessions/{sid}/" and gpu == [0]

    # A training that needs the GPU waits behind the session.
    waiting = alice.post("/api/v1/trainings", json={"name": "after-the-session", "recipe": "mlp",
                                                    "config": {"max_steps": 5}}).json()
    assert waiting["status"] == "queued", waiting

    # The notebook's own host name (browsers resolve *.localhost to loopback themselves; this process does not).
    notebooks = f"http://{loopback_host(sid)}:{srv.sessions_port}"
    ctx = _signed_in(browser, srv, tokens["alice"])
    try:
        page = ctx.new_page()
        page.set_default_timeout(30_000)
        page.goto("/sessions")
        row = page.get_by_test_id(f"session-row-{sid}")
        row.get_by_role("button", name="Open").wait_for()
        page.screenshot(path=str(screenshots / "sessions-running.png"), full_page=True)
        with ctx.expect_page() as opened:
            row.get_by_role("button", name="Open").click()
        notebook = opened.value
        # The ticket is traded for the notebook's cookie, and the address drops it.
        # JupyterLab's root sends it on to /lab.
        notebook.wait_for_url(re.compile(re.escape(f"{notebooks}{url}") + r"lab(\?.*)?$"))
        notebook.wait_for_load_state()
        printed = notebook.evaluate(RUN_CELL, "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])")
        assert printed.strip() == ",".join(map(str, gpu)), printed
        notebook.screenshot(path=str(screenshots / "session-notebook-cell.png"), full_page=True)
        # The notebook's token never reaches the browser: not in its page, not in a cookie.
        secret = _notebook_token(srv, sid)
        assert secret not in notebook.content() and secret not in json.dumps(ctx.cookies())
    finally:
        ctx.close()

    # (`gpufleet session open`'s address, in Chromium: tests/e2e/test_notebook_lab.py.)
    here = {"Host": f"{loopback_host(sid)}:{srv.sessions_port}"}
    loopback = f"http://127.0.0.1:{srv.sessions_port}"
    bob = _signed_in(browser, srv, tokens["bob"])
    try:
        assert bob.new_page().goto(notebooks + url).status == 403
        assert bob.request.post(f"/api/v1/sessions/{sid}/open",
                                headers={"Origin": srv.url, "X-Gpufleet-Key": bob.page_key}).status == 403
    finally:
        bob.close()
    stranger = browser.new_context(base_url=srv.url)
    try:
        assert stranger.new_page().goto(notebooks + url).status == 403
    finally:
        stranger.close()
    with pytest.raises(InvalidStatus) as refused:
        connect(f"ws{notebooks[4:]}{url}api/kernels/x/channels", origin=notebooks, open_timeout=60,
                sock=socket.create_connection(("127.0.0.1", srv.sessions_port)))
    assert refused.value.response.status_code == 403

    cli(srv.data_dir, "session", "stop", sid, **as_alice)
    took = wait_served("the waiting training on the freed GPU",
                 lambda: (t := alice.get(f"/api/v1/trainings/{waiting['id']}").json())["status"]
                 in ("scheduled", "running", "succeeded") and t, srv)
    assert took["gpu_ids"] == gpu
    assert alice.get(f"/api/v1/sessions/{sid}").json()["status"] == "stopped"
    assert httpx.get(f"{loopback}{url}", headers={"Authorization": f"Bearer {tokens['alice']}", **here},
                     timeout=60).status_code == 409
