"""What `gpufleet serve` sets up so that people can get in: its Unix socket for local accounts, the secret a
personal install signs sessions with, the warning of single-user mode on a shared machine, and the
sign-in link `serve --link` prints.

Imported when `serve` runs, not when the CLI starts.
"""

from __future__ import annotations

import os
import pwd
import socket
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from gpufleet.api.unixsocket import UnixListener
    from gpufleet.config import Settings


def as_checked(settings: Settings) -> Settings:
    """``settings`` as `serve` will run them, for the safety check before anything is written: on loopback
    without ``GPUFLEET_SECRET_KEY``, with a stand-in for the secret :func:`use_local_secret` makes."""
    import secrets

    if not _needs_local_secret(settings):
        return settings
    return settings.model_copy(update={"secret_key": secrets.token_urlsafe(48)})


def use_local_secret(settings: Settings) -> None:
    """On loopback without ``GPUFLEET_SECRET_KEY``, sign sessions with a secret made once in the data dir."""
    from gpufleet.datadir import local_secret, secure_data_dir

    if _needs_local_secret(settings):
        secure_data_dir(settings)
        settings.secret_key = local_secret(settings)


def _needs_local_secret(settings: Settings) -> bool:
    from gpufleet.config import DEFAULT_SECRET

    return settings.secret_key == DEFAULT_SECRET and settings.is_loopback


def listen_unix(settings: Settings) -> UnixListener | None:
    """The socket local accounts reach the server on (None: ``GPUFLEET_UNIX_SOCKET=off``); ConfigError if taken."""
    from gpufleet.api.unixsocket import UnixListener
    from gpufleet.datadir import api_socket, personal_socket_dir

    path = api_socket(settings)
    return UnixListener.bind(path, private=path.parent == personal_socket_dir()) if path is not None else None


def sockets(tcp: socket.socket, unix: UnixListener | None) -> list[socket.socket]:
    return [tcp, unix.sock] if unix is not None else [tcp]


def warn_single_user(err: Console) -> None:
    """Single-user mode makes every account on this machine the admin: say so where that means others."""
    from gpufleet.commands.tables import labelled
    from gpufleet.users.local import human_accounts

    people = human_accounts()
    if len(people) > 1:
        err.print(
            labelled("warning:", "single-user mode (GPUFLEET_AUTH=off): every account on this machine that "
                     f"reaches 127.0.0.1 is the admin, and {len(people)} people have accounts here "
                     f"({', '.join(people[:8])}{', …' if len(people) > 8 else ''}); unset GPUFLEET_AUTH so each "
                     "signs in as themselves (docs/operations.md, \"Security model\")", style="bold yellow"),
            highlight=False, soft_wrap=True,
        )


def sign_in_hint(settings: Settings, link: bool) -> str:
    """How to reach the dashboard: a sign-in link for this account when asked, else how to get one."""
    if settings.auth == "off":
        return "single-user mode: no sign-in on this machine (GPUFLEET_AUTH=off)"
    from gpufleet.datadir import api_socket

    sock = api_socket(settings)
    local = f"local accounts use the CLI as themselves through {sock}; " if sock else ""
    if not link:
        return f"{local}a browser signs in with the link `gpufleet open` prints, or with an API token"
    url, ttl = own_sign_in_link(settings)
    return (f"{local}sign in as {_me()} (once, within {ttl // 60 or 1} min; `gpufleet open` prints another):\n"
            f"  {url}")


def own_sign_in_link(settings: Settings) -> tuple[str, int]:
    """A sign-in link for the account running the server, made as `gpufleet open` would get it."""
    from gpufleet.api.auth import AuthUser
    from gpufleet.api.routes.auth import new_sign_in_link
    from gpufleet.db.session import write_session
    from gpufleet.users.local import local_account_user

    with write_session(settings) as sess:
        owner = local_account_user(sess, os.geteuid())
    link = new_sign_in_link(settings, AuthUser(owner.name, owner.role, owner.user_id, via="session"))
    return link.url, link.expires_in_s


def _me() -> str:
    return pwd.getpwuid(os.geteuid()).pw_name
