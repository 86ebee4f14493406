"""Serving the app: one uvicorn server on the TCP address and on the Unix socket for local callers."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet.api.unixsocket import bind_unix_socket, peer_protocols
from gpufleet.config import Settings
from gpufleet.datadir import api_socket


@dataclass
class Listeners:
    """The sockets a server was given before it starts, so a taken address fails before anything runs."""

    config: Any  # uvicorn.Config
    sockets: list[socket.socket] = field(default_factory=list)
    unix_path: Path | None = None
    unix_inode: int = 0

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()
        if self.unix_path is not None:
            # Only the socket this server made: a newer server may have replaced it already.
            try:
                if self.unix_path.stat().st_ino == self.unix_inode:
                    self.unix_path.unlink()
            except OSError:
                pass


def listen(app: Any, settings: Settings) -> Listeners:  # noqa: ANN401
    """Bind the TCP address and (unless ``GPUFLEET_UNIX_SOCKET=off``) the Unix socket for ``app``."""
    import uvicorn

    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level="warning",
        ws_max_size=1 << 20,
        # X-Forwarded-For/-Proto count only from the configured proxies;
        # from anyone else they would let a client pick its own address
        # (and so escape the per-address sign-in limit).
        proxy_headers=bool(settings.trusted_proxies),
        forwarded_allow_ips=list(settings.trusted_proxies) or None,
        # Live frames are small and frequent; deflating each one cost more
        # CPU than it saved (measured by bench/ws_fanout.py).
        ws_per_message_deflate=False,
        # Each connection on the Unix socket carries the account that made it.
        **peer_protocols(),
    )
    listeners = Listeners(config)
    path = api_socket(settings)
    if path is not None:
        listeners.sockets.append(bind_unix_socket(path))
        listeners.unix_path = path
        listeners.unix_inode = path.stat().st_ino
    try:
        listeners.sockets.insert(0, config.bind_socket())
    except SystemExit:
        listeners.close()
        raise
    return listeners


def run(listeners: Listeners) -> None:
    """Serve until stopped (SIGINT/SIGTERM), then give the addresses back."""
    import uvicorn

    class Server(uvicorn.Server):
        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            # Here, not after run(): uvicorn ends by raising the signal it caught, and SIGTERM ends the process.
            await super().shutdown(sockets)
            listeners.close()

    try:
        Server(listeners.config).run(sockets=listeners.sockets)
    finally:
        listeners.close()
