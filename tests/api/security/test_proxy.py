"""deploy/nginx/gpufleet.conf in front of a real `gpufleet serve`.

The shipped proxy config is used as written, with only the ports, the
certificate paths and the upstream address swapped for test ones. Through it:
HTTP redirects to HTTPS, a request without a token is refused, the dashboard
cookie comes back `Secure` (X-Forwarded-Proto reaches the API), WebSockets
upgrade with a ticket or the cookie from the same origin and are refused from
another origin, and an oversized body stops at the proxy.

Needs the `nginx` and `openssl` programs (Debian: nginx-light, openssl).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import ssl
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import websockets

from support.people import SECRET, browser_sign_in
from gpufleet.users.accounts import add_user
from gpufleet.users.tokens import create_token
from gpufleet.config import load_settings
from gpufleet.db.session import session_scope, upgrade_database
from support.servers import free_port, serve_process

ROOT = Path(__file__).resolve().parents[3]
NGINX = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/usr/local/sbin")
HAVE_TOOLS = bool(NGINX and shutil.which("openssl"))
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
pytestmark = [
    pytest.mark.slow,
    # .ci/run installs nginx-light: in CI a missing nginx is a failure, not a skip.
    pytest.mark.skipif(not HAVE_TOOLS and not IN_CI, reason="needs nginx and openssl"),
]


def _wait(url: str, proc: subprocess.Popen, verify: bool = True) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"exited with {proc.returncode}"
        try:
            httpx.get(url, timeout=2, verify=verify)
            return
        except httpx.TransportError:
            time.sleep(0.2)
    raise AssertionError(f"{url} did not answer")


def _stop(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@contextmanager
def _nginx(conf: Path) -> Iterator[subprocess.Popen]:
    nginx = subprocess.Popen([NGINX or "nginx", "-c", str(conf), "-g", "daemon off;"], start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield nginx
    finally:
        _stop(nginx)


def _proxy_config(tmp: Path, api_port: int, http_port: int, https_port: int) -> Path:
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=gpus.example.org",
         "-keyout", str(tmp / "key.pem"), "-out", str(tmp / "cert.pem"), "-days", "1"],
        check=True, capture_output=True,
    )
    site = (ROOT / "deploy/nginx/gpufleet.conf").read_text()
    for old, new in {
        "/etc/letsencrypt/live/gpus.example.org/fullchain.pem": str(tmp / "cert.pem"),
        "/etc/letsencrypt/live/gpus.example.org/privkey.pem": str(tmp / "key.pem"),
        "server 127.0.0.1:8000;": f"server 127.0.0.1:{api_port};",
        "listen 80;": f"listen 127.0.0.1:{http_port};",
        "listen 443 ssl http2;": f"listen 127.0.0.1:{https_port} ssl http2;",
        "listen [::]:80;": "",
        "listen [::]:443 ssl http2;": "",
    }.items():
        assert old in site, old
        site = site.replace(old, new)
    (tmp / "site.conf").write_text(site)
    main = tmp / "nginx.conf"
    main.write_text(
        f"pid {tmp}/nginx.pid;\nerror_log {tmp}/error.log;\nevents {{}}\n"
        f"http {{\n access_log {tmp}/access.log;\n client_body_temp_path {tmp}/body;\n"
        f" proxy_temp_path {tmp}/proxy;\n include {tmp}/site.conf;\n}}\n"
    )
    return main


async def _ws(url: str, **kw) -> str:
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    try:
        async with websockets.connect(url, ssl=ctx, open_timeout=10, **kw) as ws:
            await asyncio.wait_for(ws.recv(), timeout=10)
            return "open"
    except websockets.exceptions.InvalidStatus as exc:
        return f"rejected {exc.response.status_code}"


def test_shipped_proxy_config_in_front_of_serve(tmp_path: Path) -> None:
    data = tmp_path / "data"
    settings = load_settings(data_dir=data)
    upgrade_database(settings)
    with session_scope(settings) as sess:
        add_user(sess, "ops", "member")
        token = create_token(sess, "ops").secret
    http_port, https_port = free_port(), free_port()
    # nginx on this host, as deploy/gpufleet.env.example configures it.
    with serve_process(data, GPUFLEET_AUTH="on", GPUFLEET_SECRET_KEY=SECRET, GPUFLEET_SIMULATE="1xH100-80GB",
                       GPUFLEET_EMBEDDED_WORKER="false", GPUFLEET_TRUSTED_PROXIES='["127.0.0.1"]') as api:
        conf = _proxy_config(tmp_path, api.port, http_port, https_port)
        with _nginx(conf) as nginx:
            origin = f"https://127.0.0.1:{https_port}"
            _wait(origin + "/healthz", nginx, verify=False)

            r = httpx.get(f"http://127.0.0.1:{http_port}/api/v1/auth/whoami")
            assert r.status_code == 301 and r.headers["location"].startswith("https://")
            client = httpx.Client(base_url=origin, verify=False)
            assert client.get("/api/v1/system/gpus").status_code == 401
            r = browser_sign_in(client, token, headers={"Origin": origin})
            assert r.status_code == 200
            assert "Secure" in r.headers["set-cookie"] and "HttpOnly" in r.headers["set-cookie"]
            # Over https the cookie is host-only by name (__Host-): no other host name can set or replace it.
            cookie = r.cookies["__Host-gpufleet_session"]
            assert client.get("/api/v1/auth/whoami").json()["via"] == "session"

            ws_url = f"wss://127.0.0.1:{https_port}/api/v1/ws"
            ticket = client.post("/api/v1/auth/ws-ticket", headers={"Origin": origin}).json()["ticket"]
            assert asyncio.run(_ws(f"{ws_url}?ticket={ticket}", origin=origin)) == "open"
            # The cookie alone opens no socket, from the dashboard's origin or any other.
            cookie_header = {"Cookie": f"__Host-gpufleet_session={cookie}"}
            assert asyncio.run(_ws(ws_url, origin=origin, additional_headers=cookie_header)) == "rejected 403"
            assert asyncio.run(_ws(ws_url, origin="https://evil.example",
                                   additional_headers=cookie_header)) == "rejected 403"
            assert asyncio.run(_ws(ws_url, origin=origin)) == "rejected 403"

            r = client.post("/api/v1/trainings", content=b"x" * (2 << 20), headers={"Content-Type": "application/json"})
            assert r.status_code == 413
