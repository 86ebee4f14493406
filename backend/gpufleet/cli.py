"""The `gpufleet` command line: serve, db, and each domain's commands.

Every command starts a fresh process, and its start-up is part of what the
user waits for. So `gpufleet NAME ...` imports only the command modules that
add NAME (``COMMAND_GROUPS``; help imports them all), and a command module
loads only typer and rich: what a command needs (the settings, the database,
the server, an HTTP client, torch) it imports when it runs. ``gpufleet run``
and ``gpufleet --help`` load no server, database or torch
(tests/commands/test_start.py holds every group to that).
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from gpufleet.commands.tables import labelled, make_console

if TYPE_CHECKING:
    import socket
    from collections.abc import Callable

    from gpufleet.api.unixsocket import UnixListener
    from gpufleet.config import Settings

# serve and db; every other command comes from a module of gpufleet/commands/ (COMMAND_GROUPS), added by
# with_groups(). ``cli.app`` is this with every group added (see __getattr__ below).
base = typer.Typer(
    name="gpufleet",
    help="A team-shared GPU training server.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    # Click's plain help: rich's boxed panels gave a command's help text a third
    # of an 80-column terminal (`run --help` folded each line into four).
    rich_markup_mode=None,
)
db_app = typer.Typer(help="Database schema (Alembic migrations).", no_args_is_help=True)
base.add_typer(db_app, name="db")

console = make_console()
err = make_console(stderr=True)

# The command modules of gpufleet/commands/, in the order help lists them, each with the top-level commands it
# adds with register(app) (``gpus drain`` comes with devices' ``gpus`` group; training_files adds to ``trainings``).
# `gpufleet NAME ...` imports only the modules that add NAME: each command starts a fresh process, and a group's
# import is part of what its user waits for. tests/commands/test_start.py checks these names against register().
COMMAND_GROUPS: dict[str, tuple[str, ...]] = {
    "secret": ("secret",),
    "devices": ("gpus", "topology"),
    "train": ("train",),
    "run": ("run",),
    "trainings": ("trainings",),
    "training_files": ("trainings",),
    "sessions": ("session",),
    "sweeps": ("sweep",),
    "worker": ("worker",),
    "recommend": ("recommend",),
    "top": ("top",),
    "users": ("users", "tokens"),
    "sharing": ("groups", "usage"),
    "signin": ("open", "whoami"),
    "webhooks": ("webhooks",),
    "bookings": ("book", "bookings"),
    "pools": ("pools",),
    "doctor": ("doctor",),
}
_added: set[str] = set()


def with_groups(modules: list[str] | tuple[str, ...] | None = None) -> typer.Typer:
    """The CLI with the named command modules added (all of them by default); each is added once."""
    for name in COMMAND_GROUPS if modules is None else modules:
        if name not in _added:
            importlib.import_module(f"gpufleet.commands.{name}").register(base)
            _added.add(name)
    return base


def modules_for(argv: list[str]) -> list[str] | None:
    """The command modules `gpufleet ARGV` needs: those adding its command, none for serve and db, all for help."""
    name = next((a for a in argv if not a.startswith("-")), None)
    if name in ("serve", "db"):
        return []
    needed = [module for module, names in COMMAND_GROUPS.items() if name in names]
    return needed or None


def __getattr__(name: str) -> typer.Typer:
    if name == "app":
        return with_groups()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def fail(message: str, code: int = 2) -> NoReturn:
    """Print one clear line and exit non-zero."""
    err.print(labelled("error:", message), highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def settings_or_exit() -> Settings:
    from gpufleet.config import ConfigError, get_settings

    try:
        return get_settings()
    except ConfigError as exc:
        fail(str(exc))


@base.command()
def serve(
    host: Annotated[str | None, typer.Option(help="address to bind (default 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(help="port (default 8000)")] = None,
    worker: Annotated[bool, typer.Option(help="run the embedded worker (no Redis configured)")] = True,
    check: Annotated[bool, typer.Option("--check", help="only check the settings and that the port is free")] = False,
    link: Annotated[bool, typer.Option(help="print a sign-in link for this account (as `gpufleet open` does)")] = False,
    workers: Annotated[int, typer.Option("--workers", min=1, max=64,
                                         help="API processes on this address (more than 1 needs PostgreSQL and "
                                              "Redis; see docs/scaling.md)")] = 1,
) -> None:
    """Start the API, the dashboard, the scheduler and, with no Redis, the embedded worker and agent."""
    from gpufleet.commands.api_processes import refusal
    from gpufleet.commands.local_access import as_checked, listen_unix, use_local_secret, warn_single_user
    from gpufleet.commands.serving import AddressInUse, listen, listen_notebooks, register_this_host
    from gpufleet.config import ConfigError, load_settings

    overrides = {k: v for k, v in {"host": host, "port": port}.items() if v is not None}
    try:
        settings = load_settings(**overrides)
        if (refused := refusal(settings, workers)) is not None:
            fail(refused)
        from gpufleet.api.security.policy import check_serve_safety

        check_serve_safety(as_checked(settings))
        # The address first: a second serve on a port in use stops here, before it writes anything.
        sock = listen(settings.host, settings.port)
        notebooks = listen_notebooks(settings, sock)
        if check:
            sock.close()
            if notebooks is not None:
                notebooks.close()
            console.print(f"ok: settings valid and {_url_host(settings.host)}:{settings.port} is free", highlight=False)
            return
        unix = listen_unix(settings)
        use_local_secret(settings)
        from gpufleet.datadir import secure_data_dir

        from gpufleet.db.session import prepare_database

        secure_data_dir(settings)
        from gpufleet.secretfiles import scrub_environment

        scrub_environment()  # read into the settings; no child inherits them
        prepare_database(settings)
        inventory = register_this_host(settings)
    except (ConfigError, AddressInUse) as exc:
        fail(str(exc))
    if settings.auth == "off":
        warn_single_user(err)
    _serve(settings, (sock, notebooks), unix, inventory, worker, link, workers)


def _serve(settings: Settings, socks: tuple[socket.socket, socket.socket | None], unix: UnixListener | None,
           inventory: str, worker: bool, link: bool, workers: int) -> None:
    from gpufleet.commands.api_processes import run_processes
    from gpufleet.commands.local_access import sign_in_hint, sockets
    from gpufleet.commands.serving import StopNotice, stop_worker

    embedded = None
    if worker and settings.redis_url is None and settings.embedded_worker:
        from gpufleet.jobs.embedded import EmbeddedWorker

        embedded = EmbeddedWorker(settings).start()
    mode = "embedded (SQLite, no external service)" if settings.is_embedded else "fleet"
    console.print(f"gpufleet {_version()} — {mode}; data dir {settings.data_dir}")
    console.print(f"database: {_safe_url(settings.effective_database_url)}")
    console.print(inventory)
    from rich.text import Text

    console.print(Text.assemble("listening on ", (f"http://{_url_host(settings.host)}:{settings.port}", "bold"),
                                " (dashboard at /, API docs at /docs)"))
    sock, notebooks = socks
    if notebooks is not None:
        console.print(f"sessions' notebooks on their own origin: port {notebooks.getsockname()[1]}"
                      " (GPUFLEET_SESSIONS_PORT)", highlight=False)
    console.print(sign_in_hint(settings, link), soft_wrap=True)
    notice = StopNotice(settings, console)
    try:
        if workers > 1:
            run_processes(settings, workers, lambda _i: _uvicorn(settings, sockets(sock, unix), forked=True,
                                                                 notebooks=notebooks), console)
        else:
            _uvicorn(settings, sockets(sock, unix), forked=False, on_stop=notice.began, notebooks=notebooks)
    finally:
        if unix is not None:
            unix.close()
        if embedded is not None:
            # The worker asks each training to checkpoint and requeues it as
            # interrupted; give it the whole grace (Ctrl-C reached it already).
            stop_worker(settings, embedded, console, notice.here)


def _uvicorn(settings: Settings, listening: list[socket.socket], forked: bool,
             on_stop: Callable[[], None] | None = None, notebooks: socket.socket | None = None) -> None:
    """One API process: the app with its background loops, under uvicorn, on the sockets bound already;
    and beside it, on ``notebooks``, the sessions' notebooks' own origin."""
    import logging

    import uvicorn

    from gpufleet.api.app import create_app
    from gpufleet.api.unixsocket import peer_protocols
    from gpufleet.commands.serving import serve_notebooks, server

    config = uvicorn.Config(
        create_app(settings, background=True),
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
        access_log=settings.access_log,
        # Each connection on the Unix socket carries the account that made it.
        **peer_protocols(),
    )
    if settings.access_log:
        # uvicorn writes request lines at INFO; the rest of its log stays at warnings.
        logging.getLogger("uvicorn.access").setLevel(logging.INFO)
    # Said at once on Ctrl-C: closing connections and stopping the worker can take a while. A forked
    # process hears Ctrl-C twice (from the terminal and from its parent): once is a stop, not a forced one.
    srv = server(config, on_stop=on_stop or (lambda: None), repeat_forces=not forked)
    stop_notebooks = serve_notebooks(settings, notebooks) if notebooks is not None else None
    try:
        srv.run(sockets=listening)
    finally:
        if stop_notebooks is not None:
            stop_notebooks()


def _version() -> str:
    from gpufleet import __version__

    return __version__


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _safe_url(url: str) -> str:
    if "@" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://…@{rest.split('@', 1)[1]}"
    return url


@db_app.command("upgrade")
def db_upgrade(revision: str = "head") -> None:
    """Bring the database schema to the newest revision."""
    from gpufleet.config import ConfigError
    from gpufleet.db.session import check_database, current_revision, upgrade_database

    settings = settings_or_exit()
    try:
        check_database(settings)
        upgrade_database(settings, revision)
    except ConfigError as exc:
        fail(str(exc))
    console.print(f"database {_safe_url(settings.effective_database_url)} is at revision {current_revision(settings)}")


@db_app.command("current")
def db_current() -> None:
    """Print the database's schema revision."""
    from gpufleet.config import ConfigError
    from gpufleet.db.session import (
        check_database,
        current_revision,
        missing_sqlite_file,
    )

    settings = settings_or_exit()
    missing = missing_sqlite_file(settings)
    if missing is not None:
        console.print(f"empty: no database at {missing} yet (run `gpufleet db upgrade` or `gpufleet serve`)")
        return
    try:
        check_database(settings)
    except ConfigError as exc:
        fail(str(exc))
    console.print(current_revision(settings) or "empty (run `gpufleet db upgrade`)")


def main() -> None:
    import os

    from gpufleet.logsetup import configure_logging

    # What a command writes is private from the first command on: the data dir it may create (0700), the
    # database with the users' token hashes, logs (0600). Only this process and its children are affected.
    os.umask(os.umask(0o077) | 0o077)
    configure_logging()
    try:
        with_groups(modules_for(sys.argv[1:]))()
    except Exception as exc:
        # A ConfigError can only come from gpufleet.config, so a command that
        # never loaded the settings does not pay for importing them here.
        config = sys.modules.get("gpufleet.config")
        if config is None or not isinstance(exc, config.ConfigError):
            raise
        err.print(labelled("error:", exc), highlight=False)
        sys.exit(2)


if __name__ == "__main__":
    main()
