"""Which local socket the command line may talk to, and who must be listening on it.

A local server's socket is a door the caller walks through with her own
account: the server knows her from the kernel and she sends it her code, her
``--env`` values and runs what it answers (``session shell``). So the client
checks the other side before it sends a byte:

- **Where.** The machine's shared socket (``/run/gpufleet``, which only root
  or systemd can make) comes first. A personal socket (``$XDG_RUNTIME_DIR/gpufleet``,
  else ``/tmp/gpufleet-<uid>``) counts only in a real folder the caller owns
  with mode 0700, and only when the socket is hers too: in ``/tmp`` anyone
  may make that folder first.
- **Who.** At every connection the server's peer credentials (``SO_PEERCRED``)
  must be root's, the caller's own, or the service account's
  (``$GPUFLEET_SERVER_ACCOUNT``, default ``gpufleet``, the account
  ``deploy/systemd/gpufleet-api.service`` runs as).

Anything else is :class:`UntrustedServer`, an error that names the file, its
owner and what to do, and nothing is sent.
"""

from __future__ import annotations

import os
import pwd
import socket
import stat
import struct
from pathlib import Path
from typing import Any

import httpcore
import httpx

from gpufleet.client.errors import GpufleetError

SERVER_ACCOUNT_ENV = "GPUFLEET_SERVER_ACCOUNT"
DEFAULT_SERVER_ACCOUNT = "gpufleet"


class UntrustedServer(GpufleetError, ValueError):
    """A socket the client will not talk to: its folder, its file or its listener is not trusted."""


def _who(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def trusted_uids() -> set[int]:
    """Who may answer on a local socket: root, this account, and the service account if it exists."""
    uids = {0, os.geteuid()}
    name = os.environ.get(SERVER_ACCOUNT_ENV, "").strip() or DEFAULT_SERVER_ACCOUNT
    try:
        uids.add(pwd.getpwnam(name).pw_uid)
    except KeyError:
        pass
    return uids


def _refuse(path: Path, why: str) -> UntrustedServer:
    return UntrustedServer(
        f"refusing the server socket {path}: {why}. Another account may have put it there to pose as the "
        "gpufleet server; nothing was sent to it. Remove it if it is yours, or name the real server with "
        "GPUFLEET_UNIX_SOCKET=/run/gpufleet/gpufleet.sock or --server URL")


def check_personal(path: Path) -> bool:
    """Whether a personal socket is there to use: False when its folder or file is absent;
    :class:`UntrustedServer` when the folder or the socket is not this account's alone."""
    folder = path.parent
    try:
        st = folder.lstat()
    except FileNotFoundError:
        return False
    me = os.geteuid()
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse(path, f"{folder} is not a folder (a link or a file)")
    if st.st_uid != me:
        raise _refuse(path, f"its folder {folder} belongs to {_who(st.st_uid)}, not to you ({_who(me)})")
    if st.st_mode & 0o077:
        raise _refuse(path, f"its folder {folder} is open to other accounts (mode {st.st_mode & 0o777:04o}, "
                            "not 0700); a gpufleet server of yours makes it 0700")
    try:
        sock = path.lstat()
    except FileNotFoundError:
        return False
    if not stat.S_ISSOCK(sock.st_mode):
        return False
    if sock.st_uid != me:
        raise _refuse(path, f"the socket belongs to {_who(sock.st_uid)}, not to you")
    return True


def peer_uid(sock: socket.socket) -> int:
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", raw)[1]


def check_peer(sock: socket.socket, path: Path | str) -> None:
    """Refuse a connection whose listener is not root, this account or the service account."""
    uid = peer_uid(sock)
    if uid not in trusted_uids():
        raise _refuse(Path(path), f"the process listening on it runs as {_who(uid)}, which is neither root, you "
                                  f"nor the service account (${SERVER_ACCOUNT_ENV}, default {DEFAULT_SERVER_ACCOUNT})")


def probe(path: Path) -> None:
    """Connect once and check the listener (nothing is sent); :class:`UntrustedServer` when it is not trusted."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        try:
            sock.connect(str(path))
        except OSError:
            return  # nobody listens: the request fails as for any server that is down
        check_peer(sock, path)


class _PeerCheckedBackend(httpcore.SyncBackend):
    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Any = None) -> httpcore.NetworkStream:
        stream = super().connect_unix_socket(path, timeout=timeout, socket_options=socket_options)
        try:
            check_peer(stream.get_extra_info("socket"), path)
        except UntrustedServer:
            stream.close()
            raise
        return stream


def transport(path: Path) -> httpx.HTTPTransport:
    """An HTTP transport over the socket at ``path`` that checks the listener at every connection."""
    t = httpx.HTTPTransport(uds=str(path))
    pool = t._pool  # httpx exposes no network backend option
    if not hasattr(pool, "_network_backend"):
        raise RuntimeError("this httpcore version has no network backend to check the server's socket with")
    pool._network_backend = _PeerCheckedBackend()
    return t
