"""Where gpufleet keeps things on this machine: the data dir, private to the account gpufleet runs as, and the
Unix socket local callers reach the server on."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the CLI finds the socket without loading the server's settings
    from gpufleet.config import ApiSettings, StoreSettings

PRIVATE_UMASK = 0o077


def secure_data_dir(settings: StoreSettings) -> None:
    """Keep the data dir to this user: the dir 0700, what gpufleet writes 0600/0700.

    The data dir holds the database (users, token hashes), trainings' configs,
    logs and checkpoints. The umask is inherited by the worker, the launcher
    and the ranks, so their files are private too. An older install's
    top-level entries are tightened; the dir's own mode already hides what
    lies deeper.
    """
    os.umask(PRIVATE_UMASK)
    d = settings.data_dir
    d.mkdir(parents=True, exist_ok=True)
    try:
        d.chmod(0o700)
        for entry in d.iterdir():
            mode = entry.stat().st_mode & 0o777
            if mode & 0o077 and not entry.is_symlink():
                entry.chmod(0o700 if entry.is_dir() else 0o600)
    except OSError:
        # Not ours (a shared volume owned by another user): leave it as the operator set it.
        pass


SECRET_FILE = "secret_key"


def local_secret(settings: StoreSettings) -> str:
    """The secret a server on loopback signs sessions with when ``GPUFLEET_SECRET_KEY`` is not set.

    Made once, random, in the data dir (0600), so a personal install signs
    sessions that survive a restart without anyone choosing a secret.
    """
    path = settings.data_dir / SECRET_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    with os.fdopen(fd, "w") as fh:
        fh.write(secrets.token_urlsafe(48) + "\n")
    return path.read_text().strip()


def api_socket(settings: ApiSettings) -> Path | None:
    """The Unix socket a server listens on for local callers, or None (``GPUFLEET_UNIX_SOCKET=off``)."""
    value = settings.unix_socket.strip()
    if value.lower() == "off":
        return None
    return Path(value).expanduser() if value else default_socket_path()


SOCKET_NAME = "gpufleet.sock"
# Where a server shared by the machine's accounts listens: root's, or a service account's
# given /run/gpufleet by systemd (RuntimeDirectory=gpufleet).
SHARED_SOCKET_DIR = Path("/run/gpufleet")


def personal_socket_dir() -> Path:
    """This account's own socket folder: under ``$XDG_RUNTIME_DIR``, else ``/tmp/gpufleet-<uid>`` (made 0700)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return Path(runtime) / "gpufleet" if runtime else Path(f"/tmp/gpufleet-{os.geteuid()}")


def default_socket_path() -> Path:
    """The machine's shared place when this account may use it, else one of this account's own."""
    shared = SHARED_SOCKET_DIR
    if os.geteuid() == 0 or (shared.is_dir() and os.access(shared, os.W_OK | os.X_OK)):
        return shared / SOCKET_NAME
    return personal_socket_dir() / SOCKET_NAME


def socket_candidates() -> list[tuple[Path, bool]]:
    """Where a command-line client looks for a server's socket, each with whether it is a personal one:
    ``GPUFLEET_UNIX_SOCKET``, else the machine's shared socket first, then this account's own.

    The shared one comes first because only root (or systemd) can make ``/run/gpufleet``; a personal
    folder in ``/tmp`` can be made by anyone (``gpufleet.client.localsocket`` checks it)."""
    value = os.environ.get("GPUFLEET_UNIX_SOCKET", "").strip()
    if value.lower() == "off":
        return []
    if value:
        return [(Path(value).expanduser(), False)]
    return [(SHARED_SOCKET_DIR / SOCKET_NAME, False), (personal_socket_dir() / SOCKET_NAME, True)]
