"""`gpufleet serve` bound to every address, as a team runs it: a real process.

With sign-in configured it starts; over real HTTP and a real WebSocket
handshake a request without a token is refused, a token works, and a
WebSocket from a foreign Origin or without credentials is turned away.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
import websockets

from support.people import SECRET
from gpufleet.users.accounts import add_user
from gpufleet.users.tokens import create_token
from gpufleet.config import load_settings
from gpufleet.db.session import session_scope, upgrade_database
from support.servers import serve_process


async def _ws_outcome(url: str, **kw) -> str:
    try:
        async with websockets.connect(url, open_timeout=10, **kw) as ws:
            await asyncio.wait_for(ws.recv(), timeout=10)
            return "open"
    except websockets.exceptions.ConnectionClosed as exc:
        return f"closed {exc.rcvd.code if exc.rcvd else None}"
    except websockets.exceptions.InvalidStatus as exc:
        return f"rejected {exc.response.status_code}"


@pytest.mark.slow
def test_network_bound_server_with_auth(tmp_path: Path) -> None:
    data = tmp_path / "data"
    settings = load_settings(data_dir=data)
    upgrade_database(settings)
    with session_scope(settings) as sess:
        add_user(sess, "ops", "admin")
        token = create_token(sess, "ops").secret
    # Bound to every address, as a team runs it; reached over loopback.
    with serve_process(data, host="0.0.0.0", GPUFLEET_AUTH="on", GPUFLEET_SECRET_KEY=SECRET,
                       GPUFLEET_EMBEDDED_WORKER="false") as srv:
        base, port = srv.url, srv.port
        r = httpx.post(f"{base}/api/v1/trainings", json={"name": "x", "recipe": "mlp"})
        assert r.status_code == 401 and "sign-in required" in r.json()["detail"]
        assert httpx.get(f"{base}/api/v1/system/gpus").status_code == 401
        who = httpx.get(f"{base}/api/v1/auth/whoami", headers={"Authorization": f"Bearer {token}"})
        assert who.status_code == 200 and who.json()["name"] == "ops" and who.json()["auth_required"] is True

        ws_url = f"ws://127.0.0.1:{port}/api/v1/ws"
        # Closed before accept: the handshake itself is answered 403.
        assert asyncio.run(_ws_outcome(ws_url)) == "rejected 403"
        ticket = httpx.post(f"{base}/api/v1/auth/ws-ticket", headers={"Authorization": f"Bearer {token}"}).json()
        evil = asyncio.run(_ws_outcome(f"{ws_url}?ticket={ticket['ticket']}", origin="https://evil.example"))
        assert evil == "rejected 403"
        ticket = httpx.post(f"{base}/api/v1/auth/ws-ticket", headers={"Authorization": f"Bearer {token}"}).json()
        assert asyncio.run(_ws_outcome(f"{ws_url}?ticket={ticket['ticket']}")) == "open"
