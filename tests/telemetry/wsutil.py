"""The app the live-stream tests serve (tests/support/servers.py), what an agent publishes, and raw WebSocket
helpers."""

from __future__ import annotations

import base64
import json
import os
import socket
from datetime import datetime, timezone
from typing import Any

from fastapi import FastAPI

from gpufleet.config import Settings
from gpufleet.events import TELEMETRY_SAMPLES, get_bus
from gpufleet.telemetry.sample import GPUSample
from gpufleet.telemetry.stream import StreamConfig


def build_app(settings: Settings, stream_config: StreamConfig | None = None) -> FastAPI:
    """The product's app when its factory can be built here, else one with the telemetry routers."""
    try:
        from gpufleet.api.app import create_app

        app = create_app(settings)
    except ImportError:
        from gpufleet.api import ws
        from gpufleet.api.routes import metrics

        app = FastAPI()
        app.state.settings = settings
        app.include_router(metrics.router)
        app.include_router(ws.router)
    # Who may open the socket is the auth suite's subject; these tests are about the stream.
    from gpufleet.api.auth import AuthUser

    tester = AuthUser(name="tester", role="admin", via="local")
    app.state.ws_authenticate = lambda _ws, _s: tester
    if stream_config is not None:
        app.state.stream_config = stream_config
    return app


def publish(settings: Settings, host: str, gpus: int, value: float, *, pad: int = 0) -> None:
    """What an agent publishes each round: one batch for ``host``; utilization = ``value``."""
    from gpufleet.telemetry.live import LOCAL

    now = datetime.now(timezone.utc)
    samples = [GPUSample(host=host, index=i, timestamp=now, utilization=value, memory_used=int(value),
                         memory_total=1000, temperature=40.0, power_draw=100.0,
                         error=("x" * pad) or None) for i in range(gpus)]
    LOCAL.put_host(host, samples)
    get_bus(settings).publish(TELEMETRY_SAMPLES, {"host": host, "samples": [x.to_dict() for x in samples]})


def messages(frame: str) -> list[dict[str, Any]]:
    m = json.loads(frame)
    return m["messages"] if m.get("type") == "batch" else [m]


class RawNeverReader:
    """A WebSocket client that subscribes and then never reads a byte: a stuck dashboard tab."""

    def __init__(self, addr: str, channels: list[str]) -> None:
        host, port = addr.split(":")
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.connect((host, int(port)))
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            f"GET /api/v1/ws HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.sock.recv(1)
        assert b" 101 " in head.split(b"\r\n")[0], head
        for ch in channels:
            self._send_text(json.dumps({"op": "subscribe", "channel": ch}))

    def _send_text(self, text: str) -> None:
        payload = text.encode()
        mask = os.urandom(4)
        assert len(payload) < 126
        frame = bytes([0x81, 0x80 | len(payload)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(frame)

    def close(self) -> None:
        self.sock.close()
