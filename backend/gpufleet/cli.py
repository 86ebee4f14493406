"""The `gpufleet` command line: serve, db, and each domain's commands.

Every command group is imported here, but a group's module loads only typer
and rich: what a command needs (the settings, the database, the server, an
HTTP client, torch) it imports when it runs. Every command starts a fresh
process, and its start-up is part of what the user waits for, so
``gpufleet run`` and ``gpufleet --help`` load no server, database or torch
(tests/cli/test_start.py holds every group to that).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.console import Console

from gpufleet.commands import (
    devices,
    recommend,
    run,
    sharing,
    signin,
    top,
    train,
    trainings,
    users,
    worker,
)

if TYPE_CHECKING:
    from gpufleet.config import Settings

app = typer.Typer(
    name="gpufleet",
    help="A team-shared GPU training server.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
db_app = typer.Typer(help="Database schema (Alembic migrations).", no_args_is_help=True)
app.add_typer(db_app, name="db")

console = Console()
err = Console(stderr=True)

# The command modules of gpufleet/commands/, in the order help lists them; each adds its commands with
# register(app) (``gpus drain`` comes with devices' ``gpus`` group).
COMMAND_GROUPS = (devices, train, run, trainings, worker, recommend, top, users, sharing, signin)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print one clear line and exit non-zero."""
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def settings_or_exit() -> Settings:
    from gpufleet.config import ConfigError, get_settings

    try:
        return get_settings()
    except ConfigError as exc:
        fail(str(exc))


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="address to bind (default 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(help="port (default 8000)")] = None,
    worker: Annotated[bool, typer.Option(help="run the embedded worker (no Redis configured)")] = True,
    link: Annotated[bool, typer.Option(help="print a sign-in link for this account (as `gpufleet open` does)")] = False,
) -> None:
    """Start the API, the dashboard, the scheduler and, with no Redis, the embedded worker and agent."""
    from gpufleet.commands.serving import listen_or_fail, prepare, sign_in_hint

    settings, inventory = prepare(host, port)
    from gpufleet.api import server
    from gpufleet.api.app import create_app

    listeners = listen_or_fail(create_app(settings, background=True), settings)
    embedded = None
    if worker and settings.redis_url is None and settings.embedded_worker:
        from gpufleet.jobs.embedded import EmbeddedWorker

        embedded = EmbeddedWorker(settings).start()
    mode = "embedded (SQLite, no external service)" if settings.is_embedded else "fleet"
    console.print(f"gpufleet {_version()} — {mode}; data dir {settings.data_dir}")
    console.print(f"database: {_safe_url(settings.effective_database_url)}")
    console.print(inventory)
    console.print(f"listening on [bold]http://{_url_host(settings.host)}:{settings.port}[/] "
                  f"(dashboard at /, API docs at /docs)")
    console.print(sign_in_hint(settings, link), soft_wrap=True)
    try:
        server.run(listeners)
    finally:
        if embedded is not None:
            # The worker asks each training to checkpoint and requeues it as
            # interrupted; give it the whole grace (Ctrl-C reached it already).
            embedded.stop(timeout=settings.stop_grace_s + 15)


@app.command()
def secret() -> None:
    """Print a new random value for GPUFLEET_SECRET_KEY (384 bits)."""
    import secrets as _secrets

    print(_secrets.token_urlsafe(48))


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


for group in COMMAND_GROUPS:
    group.register(app)


def main() -> None:
    import os

    from gpufleet.logsetup import configure_logging

    # What a command writes is private from the first command on: the data dir it may create (0700), the
    # database with the users' token hashes, logs (0600). Only this process and its children are affected.
    os.umask(os.umask(0o077) | 0o077)
    configure_logging()
    try:
        app()
    except Exception as exc:
        # A ConfigError can only come from gpufleet.config, so a command that
        # never loaded the settings does not pay for importing them here.
        config = sys.modules.get("gpufleet.config")
        if config is None or not isinstance(exc, config.ConfigError):
            raise
        err.print(f"[bold red]error:[/] {exc}", highlight=False)
        sys.exit(2)


if __name__ == "__main__":
    main()
