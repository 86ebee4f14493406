"""What sign-in costs per request.

Times ``GET /api/v1/auth/whoami`` over HTTP against a real uvicorn server on
loopback (size limits, the auth gate, the route), one keep-alive client,
three ways in one run:

- baseline: the loopback server without sign-in (the implicit local admin, no
  database lookup);
- bearer token: one indexed lookup of the token's SHA-256 (plus the user);
- session cookie (with its page key): HMAC checks of the cookie and the key, then its ``browser_sessions`` row with
  the user and the token, one query by primary key.

Prints p50/p99 per request and each mode's ratio to the baseline.

    .venv/bin/python bench/auth_overhead.py [--requests 2000] [--database-url postgresql://…]
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx
import uvicorn
from fastapi import FastAPI

from gpufleet.api.app import guarded_app
from gpufleet.users.accounts import add_user
from gpufleet.users.tokens import create_token
from gpufleet.config import Settings, load_settings
from gpufleet.db.session import session_scope, upgrade_database


def _app(settings: Settings) -> FastAPI:
    return guarded_app(settings)


class _Server:
    """uvicorn in a thread on a free loopback port."""

    def __init__(self, app: FastAPI):
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        while not self.server.started:
            time.sleep(0.01)
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def _time(client: httpx.Client, n: int) -> list[float]:
    for _ in range(50):  # warm up: connection pools, caches
        client.get("/api/v1/auth/whoami")
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        r = client.get("/api/v1/auth/whoami")
        out.append(time.perf_counter() - t0)
        assert r.status_code == 200, r.text
    return out


def _row(name: str, samples: list[float], base: float | None) -> str:
    q = statistics.quantiles(samples, n=100)
    p50, p99 = statistics.median(samples) * 1e3, q[98] * 1e3
    ratio = f"{statistics.median(samples) / base:5.2f}x" if base else "  1.00x"
    return f"{name:<16} p50 {p50:7.3f} ms   p99 {p99:7.3f} ms   {ratio} baseline p50"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--database-url", default=None)
    args = ap.parse_args()
    data = Path(tempfile.mkdtemp(prefix="gpufleet-bench-"))

    local = load_settings(data_dir=data, auth="off")  # single-user mode: the implicit local admin
    upgrade_database(local)
    secured = load_settings(data_dir=data, auth="on", secret_key=secrets.token_urlsafe(48),
                            database_url=args.database_url)
    if args.database_url:
        upgrade_database(secured)
    name = f"bench{int(time.time())}"
    with session_scope(secured) as sess:
        add_user(sess, name, "member")
        token = create_token(sess, name).secret

    with _Server(_app(local)) as url, httpx.Client(base_url=url) as client:
        base = _time(client, args.requests)
    with _Server(_app(secured)) as url:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}) as client:
            bearer = _time(client, args.requests)
        with httpx.Client(base_url=url) as browser:
            signed_in = browser.post("/api/v1/auth/sign-in", json={"token": token})
            assert signed_in.status_code == 200, signed_in.text
            # As the dashboard sends it: the cookie beside its page key (the cookie alone signs nothing in).
            browser.headers["X-Gpufleet-Key"] = signed_in.json()["page_key"]
            session = _time(browser, args.requests)

    db = "PostgreSQL" if args.database_url else "SQLite"
    print(f"GET /api/v1/auth/whoami, {args.requests} requests each, uvicorn on loopback, {db}")
    b50 = statistics.median(base)
    print(_row("local (baseline)", base, None))
    print(_row("bearer token", bearer, b50))
    print(_row("session cookie", session, b50))


if __name__ == "__main__":
    main()
