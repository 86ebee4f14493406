"""What `gpufleet serve` does before it serves: settings, safety, the data dir, sign-in, this host's GPUs.

Imported when `serve` runs, not when the CLI starts.
"""

from __future__ import annotations

import os
import pwd
from typing import TYPE_CHECKING, Any, NoReturn

from rich.console import Console

if TYPE_CHECKING:
    from gpufleet.api.server import Listeners
    from gpufleet.config import Settings

err = Console(stderr=True)


def _fail(message: str) -> NoReturn:
    import typer

    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def prepare(host: str | None, port: int | None) -> tuple[Settings, str]:
    """The server's settings, checked, on a private data dir and a current database; and its GPUs, in words."""
    from gpufleet.api.security.policy import check_serve_safety
    from gpufleet.config import DEFAULT_SECRET, ConfigError, load_settings
    from gpufleet.datadir import local_secret, secure_data_dir
    from gpufleet.db.session import prepare_database

    overrides = {k: v for k, v in {"host": host, "port": port}.items() if v is not None}
    try:
        settings = load_settings(**overrides)
        if settings.secret_key == DEFAULT_SECRET and settings.is_loopback:
            # A personal install signs its sessions with a secret of its own, made once.
            secure_data_dir(settings)
            settings.secret_key = local_secret(settings)
        check_serve_safety(settings)
        secure_data_dir(settings)
        prepare_database(settings)
        inventory = register_this_host(settings)
    except ConfigError as exc:
        _fail(str(exc))
    if settings.auth == "off":
        warn_single_user()
    return settings, inventory


def listen_or_fail(app: Any, settings: Settings) -> Listeners:  # noqa: ANN401
    from gpufleet.api.server import listen
    from gpufleet.config import ConfigError

    try:
        return listen(app, settings)
    except ConfigError as exc:
        _fail(str(exc))


def warn_single_user() -> None:
    """Single-user mode makes every account on this machine the admin: say so where that means others."""
    from gpufleet.users.local import human_accounts

    people = human_accounts()
    if len(people) > 1:
        err.print(
            f"[bold yellow]warning:[/] single-user mode (GPUFLEET_AUTH=off): every account on this machine that "
            f"reaches 127.0.0.1 is the admin, and {len(people)} people have accounts here "
            f"({', '.join(people[:8])}{', …' if len(people) > 8 else ''}); unset GPUFLEET_AUTH so each signs in "
            "as themselves (docs/operations.md, \"Security model\")",
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
            f"  [bold]{url}[/]")


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


def register_this_host(settings: Settings) -> str:
    """Write this host's GPUs to the database; return the lines that say what was found."""
    from gpufleet.devices import detect_gpus, detect_topology, log_gpu_topology
    from gpufleet.telemetry.inventory import register_host

    gpus = detect_gpus(settings)
    if not gpus and settings.redis_url:
        # The API machine of a fleet: its workers register the GPU hosts; an
        # empty host here would only show as a GPU host with no GPUs.
        return f"host {settings.host_name}: no GPUs, so not registered as a GPU host (each GPU host runs `gpufleet worker`)"
    inv = register_host(settings)
    log_gpu_topology(detect_topology(settings, gpus))
    if not gpus:
        return (f"host {inv.host_name}: no GPUs found (trainings sent here wait for a GPU host; "
                "`gpufleet train --local --devices cpu` trains on this CPU; "
                "GPUFLEET_SIMULATE=4xH100-80GB simulates a fleet)")
    sim = " (simulated)" if settings.simulate else ""
    lines = [f"host {inv.host_name}: {len(gpus)} GPU(s){sim}"]
    for g in gpus:
        mem = f"{g.memory_total / 2**30:.0f} GiB" if g.memory_total else "? GiB"
        state = "" if g.healthy else f"  [red]unhealthy: {g.error}[/]"
        lines.append(f"  {g.backend}:{g.device_id}  {g.name}  {mem}{state}")
    return "\n".join(lines)


