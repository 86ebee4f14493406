"""A member's hostile notebook, opened by a signed-in admin in Chromium, gets none of the admin's powers.

`gpufleet serve` with sign-in on, one simulated GPU, two members with Unix
accounts of their own. Mallory (a member who may run code) configures her
own Jupyter server as any member can, from her home's
``~/.jupyter/jupyter_server_config.py``: it serves a page of hers, with no
sandbox, beside the notebook's own. The page calls gpufleet's API with the
viewer's credentials (``fetch`` with ``credentials: 'include'``, as JSON and
as a form-like ``text/plain`` post that needs no preflight): a sign-in link
for the viewer, Mallory's gpufleet user mapped onto Bob's Unix account,
her priority cap raised to 1000, a GPU drained. The admin joins her session
from the Sessions page and then opens her page. None of it may take effect.
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from sqlalchemy import select

from gpufleet.config import load_settings
from gpufleet.db.models import GPU, User
from gpufleet.db.session import session_scope
from gpufleet.users.groups import user_quotas
from support.people import context_sign_in
from support.servers import ServedProcess, cli, make_token, serve_process, wait_served
from support.unix import short_name, unix_account

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# Mallory's page: every call a page could make with the viewer's sign-in, each as JSON and as a simple post.
EVIL_PAGE = """<!doctype html><meta charset="utf-8"><title>plots</title><pre id="out">working</pre>
<script>
const API = %(api)s, ME = %(me)s, BOB = %(bob)s, HOST = %(host)s;
const calls = [
  ['POST', '/api/v1/auth/sign-in-link', null],
  ['PUT', `/api/v1/users/${ME}/unix-account`, {unix_account: BOB, force: true}],
  ['PUT', `/api/v1/users/${ME}/quota`, {max_gpus: null, gpu_hours_per_week: null, share: 1, max_priority: 1000}],
  ['POST', `/api/v1/system/gpus/${HOST}/0/drain`, {reason: 'mine now'}],
];
async function attempt(method, path, body, asJson) {
  const init = {method, credentials: 'include'};
  if (asJson) { init.headers = {'Content-Type': 'application/json'}; if (body) init.body = JSON.stringify(body); }
  else {
    init.mode = 'no-cors'; init.headers = {'Content-Type': 'text/plain'}; if (body) init.body = JSON.stringify(body);
  }
  try {
    const r = await fetch(API + path, init);
    return {path, asJson, status: r.status, type: r.type, text: r.type === 'opaque' ? '' : await r.text()};
  } catch (e) { return {path, asJson, error: String(e)}; }
}
(async () => {
  const results = [];
  for (const [method, path, body] of calls) {
    results.push(await attempt(method, path, body, true));
    results.push(await attempt(method, path, body, false));
  }
  window.__results = results;
  document.getElementById('out').textContent = JSON.stringify(results, null, 1);
})();
</script>
"""


def _hostile_home(root: Path, name: str, page: str) -> None:
    """Mallory's home, her page in it, and her Jupyter config that serves it unsandboxed."""
    home = root / f"home-{name}"
    (home / ".jupyter").mkdir(parents=True)
    (home / "www").mkdir()
    (home / "www" / "plots.html").write_text(page)
    (home / ".jupyter" / "jupyter_server_config.py").write_text(
        "c = get_config()  # noqa\n"
        f"c.ServerApp.extra_static_paths = [{str(home / 'www')!r}]\n"
        "# No sandbox for anything this server serves.\n"
        "c.ServerApp.tornado_settings = {'headers': {'Content-Security-Policy': \"frame-ancestors *\"},"
        " 'nbconvert_csp_sandbox': False}\n")
    subprocess.run(["chown", "-R", f"{name}:{name}", str(home)], check=True)
    home.chmod(0o700)
    subprocess.run(["usermod", "-d", str(home), name], check=True, capture_output=True)


@pytest.fixture
def fleet(dashboard_built: Path) -> Iterator[tuple[ServedProcess, dict[str, str], dict[str, str], dict[str, str]]]:
    root = Path(tempfile.mkdtemp(prefix="gpufleet-takeover-", dir="/tmp"))
    root.chmod(0o755)
    env = {"GPUFLEET_SIMULATE": "1xH100-80GB", "GPUFLEET_AUTH": "on", "GPUFLEET_SECRET_KEY": secrets.token_urlsafe(32)}
    names = {"mallory": short_name("tkm"), "bob": short_name("tkb"), "admin": "tk-admin"}
    try:
        with unix_account(names["mallory"]), unix_account(names["bob"]):
            tokens = {key: make_token(root / "data", name, "admin" if key == "admin" else "member", **env)
                      for key, name in names.items()}
            cli(root / "data", "users", "grant", names["mallory"], "run_code", **env)
            with serve_process(root / "data", **env) as srv:
                page = EVIL_PAGE % {"api": json.dumps(srv.url), "me": json.dumps(names["mallory"]),
                                    "bob": json.dumps(names["bob"]), "host": json.dumps("sim-host")}
                _hostile_home(root, names["mallory"], page)
                yield srv, tokens, names, env
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _state(srv: ServedProcess, mallory: str) -> tuple[object, object, object]:
    """What the page tried to change: Mallory's Unix mapping, her priority cap, GPU 0's drain."""
    with session_scope(load_settings(data_dir=srv.data_dir)) as sess:
        mapped = sess.scalar(select(User.unix_account).where(User.name == mallory))
        cap = getattr(user_quotas(sess).get(mallory), "max_priority", None)
        drained = sess.scalar(select(GPU.drained).where(GPU.index == 0))
    return mapped, cap, drained


def test_a_hostile_notebook_opened_by_an_admin_acts_with_none_of_the_admins_powers(browser, fleet) -> None:
    srv, tokens, names, env = fleet
    mallory = httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {tokens['mallory']}"}, timeout=60)
    as_mallory = {**env, "GPUFLEET_SERVER": srv.url, "GPUFLEET_TOKEN": tokens["mallory"]}
    sid = json.loads(cli(srv.data_dir, "session", "start", "--gpus", "1", "--jupyter", "--json", **as_mallory))["id"]
    wait_served("the session running",
                lambda: (s := mallory.get(f"/api/v1/sessions/{sid}").json())["status"] == "running" and s["url"], srv)
    before = _state(srv, names["mallory"])
    assert before == (None, None, False), before

    # Every page under its real policy: the dashboard's, and what the notebooks' origin sets.
    ctx = browser.new_context(base_url=srv.url, viewport={"width": 1280, "height": 800}, bypass_csp=False)
    try:
        context_sign_in(ctx, srv.url, tokens["admin"])
        page = ctx.new_page()
        page.set_default_timeout(60_000)
        blocked: list[str] = []
        page.on("console", lambda m: blocked.append(m.text) if "Content Security Policy" in m.text else None)
        # The dashboard works under its own policy: its scripts, its API calls, its live stream.
        page.goto("/")
        page.wait_for_selector(".live-open")
        page.goto("/sessions")
        row = page.get_by_test_id(f"session-row-{sid}")
        with ctx.expect_page() as opened:
            row.get_by_role("button", name="Join").click()  # an admin joins another's notebook explicitly
        notebook = opened.value
        notebook.wait_for_url(f"**/sessions/{sid}/**")
        parts = urlsplit(notebook.url)
        hostile = notebook.goto(f"{parts.scheme}://{parts.netloc}/sessions/{sid}/static/plots.html")
        assert hostile is not None and hostile.status == 200, "Mallory's page was not served to the admin"
        notebook.wait_for_function("window.__results !== undefined", timeout=60_000)
        results = notebook.evaluate("window.__results")
    finally:
        ctx.close()
    assert blocked == [], blocked

    assert len(results) == 8, results  # her script ran, every call was made
    for r in results:
        assert "/api/v1/auth/link?code=" not in r.get("text", ""), f"the page got a sign-in link: {r}"
        assert r.get("status") not in (200, 201), f"the API did what the page asked: {r}"
    assert _state(srv, names["mallory"]) == before
    # The admin's own powers are intact, used as the admin means to: with the token.
    admin = httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {tokens['admin']}"}, timeout=60)
    assert admin.post("/api/v1/auth/sign-in-link").status_code == 200
    cli(srv.data_dir, "session", "stop", sid, **as_mallory)
