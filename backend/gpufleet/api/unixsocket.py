"""The server's Unix socket: local callers known by the account that connected.

``gpufleet serve`` listens on TCP and on this socket in one uvicorn server.
For a connection on the socket the kernel's peer credentials (``SO_PEERCRED``:
the uid that connected) go into the ASGI scope, under
``scope["extensions"][PEER_KEY]``, where the auth gate reads them. Only the
server puts them there, and only for a connection on the socket, so no header
or TCP connection can claim an account.
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from gpufleet.config import ConfigError

PEER_KEY = "gpufleet.peer"


@dataclass(frozen=True)
class Peer:
    """The process at the other end of a socket connection, as the kernel saw it connect."""

    pid: int
    uid: int
    gid: int


def peer_of(sock: socket.socket | None) -> Peer | None:
    """The peer credentials of a connected Unix socket; None for any other socket."""
    if sock is None or sock.family != socket.AF_UNIX:
        return None
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return Peer(*struct.unpack("3i", raw))


def scope_peer(scope: Scope) -> Peer | None:
    peer = scope.get("extensions", {}).get(PEER_KEY)
    return peer if isinstance(peer, Peer) else None


class _WithPeer:
    """The app, with one connection's peer in the scope of each request on it."""

    def __init__(self, app: ASGIApp, peer: Peer):
        self.app = app
        self.peer = peer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope = dict(scope)
        scope["extensions"] = {**(scope.get("extensions") or {}), PEER_KEY: self.peer}
        await self.app(scope, receive, send)


def with_peers(protocol: type[asyncio.Protocol]) -> type[asyncio.Protocol]:
    """A uvicorn protocol class (HTTP or WebSocket) that reads each Unix connection's peer as it is made."""

    class PeerProtocol(protocol):  # type: ignore[misc, valid-type]
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            peer = peer_of(transport.get_extra_info("socket"))
            if peer is not None:
                self.app = _WithPeer(self.app, peer)

    PeerProtocol.__name__ = f"Peer{protocol.__name__}"
    return PeerProtocol


def quiet_refusals(protocol: type[asyncio.Protocol]) -> type[asyncio.Protocol]:
    """A uvicorn WebSocket protocol that takes a refusal sent as an HTTP answer (403, 404 ...) as the end
    of the handshake. uvicorn's sans-I/O protocol logs each such refusal as an ERROR ("ASGI callable returned
    without completing handshake"): a line anyone could add to the log by knocking on a notebook's socket."""

    class QuietProtocol(protocol):  # type: ignore[misc, valid-type]
        async def send(self, message: Any) -> None:
            await super().send(message)
            if message["type"] == "websocket.http.response.body" and not message.get("more_body", False):
                self.handshake_complete = True  # the refusal is sent and the connection closed

    QuietProtocol.__name__ = f"Quiet{protocol.__name__}"
    return QuietProtocol


def peer_protocols() -> dict[str, type[asyncio.Protocol]]:
    """``uvicorn.Config`` arguments (``http=``, ``ws=``) that put the peer in every scope on the socket."""
    from uvicorn.config import HTTP_PROTOCOLS, WS_PROTOCOLS
    from uvicorn.importer import import_from_string

    return {"http": with_peers(import_from_string(HTTP_PROTOCOLS["auto"])),
            "ws": with_peers(quiet_refusals(import_from_string(WS_PROTOCOLS["auto"])))}


def _make_private(folder: Path) -> None:
    """A personal socket folder of an older version (0755) made 0700; someone else's is refused."""
    st = folder.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise ConfigError(f"{folder} belongs to uid {st.st_uid}, not to this account (or is not a folder): another "
                          "account may pose as this server there; remove it, or set GPUFLEET_UNIX_SOCKET")
    if st.st_mode & 0o077:
        folder.chmod(0o700)


@dataclass
class UnixListener:
    """The server's listening Unix socket, which every local account may connect to."""

    sock: socket.socket
    path: Path
    inode: int

    @classmethod
    def bind(cls, path: Path, private: bool = False) -> UnixListener:
        """Listen at ``path``: its folder is made (0755; 0700 when ``private``, a personal server's, which
        the client uses only when it is its own and 0700) when missing; a socket left by a server that is
        gone is replaced; one a live server answers on is refused (:class:`ConfigError`)."""
        if len(os.fsencode(path)) >= 107:
            raise ConfigError(f"GPUFLEET_UNIX_SOCKET: {path} is too long for a Unix socket (107 bytes at most)")
        if not path.parent.is_dir():
            path.parent.mkdir(parents=True)
            path.parent.chmod(0o700 if private else 0o755)
        elif private:
            _make_private(path.parent)
        if path.exists() or path.is_symlink():
            if not stat.S_ISSOCK(path.lstat().st_mode):
                raise ConfigError(f"GPUFLEET_UNIX_SOCKET: {path} exists and is not a socket; remove it or set another")
            if _answers(path):
                raise ConfigError(f"another server already listens on {path}; stop it, or set GPUFLEET_UNIX_SOCKET "
                                  "to another path (or off)")
            path.unlink()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(path))
            # Who may connect is not the question (the server asks each caller who it is): any account may.
            path.chmod(0o666)
            sock.listen(2048)
        except OSError as exc:
            sock.close()
            raise ConfigError(f"cannot listen on {path}: {exc.strerror}") from None
        return cls(sock, path, path.stat().st_ino)

    def close(self) -> None:
        """Stop listening and remove the socket, unless a newer server has replaced it already."""
        self.sock.close()
        try:
            if self.path.stat().st_ino == self.inode:
                self.path.unlink()
        except OSError:
            pass


def _answers(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
        return True
    except OSError as exc:
        return exc.errno not in (errno.ECONNREFUSED, errno.ENOENT)
    finally:
        probe.close()
