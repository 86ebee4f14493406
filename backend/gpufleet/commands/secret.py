"""`gpufleet secret` (a new value for GPUFLEET_SECRET_KEY) and `gpufleet secret rotate`.

Every dashboard cookie names a row in the server's database, so ending those
rows signs every browser out at once, with no restart; the new secret then
makes the old signatures worthless too once the servers run with it.
"""

from __future__ import annotations

import typer
from rich.console import Console

from gpufleet.commands import users

secret_app = typer.Typer(help="The server's signing secret (GPUFLEET_SECRET_KEY).")
err = Console(stderr=True)


def _new_secret() -> str:
    import secrets as _secrets

    return _secrets.token_urlsafe(48)


@secret_app.callback(invoke_without_command=True)
def secret(ctx: typer.Context) -> None:
    """Print a new random value for GPUFLEET_SECRET_KEY (384 bits); `rotate` also signs everyone out."""
    if ctx.invoked_subcommand is None:
        print(_new_secret())


@secret_app.command("rotate")
def secret_rotate() -> None:
    """End every dashboard session now, and print a new secret to give the servers."""
    from gpufleet.users.sessions import end_sessions

    ended = users._run(end_sessions)
    err.print(f"ended {ended} dashboard session(s): every browser must sign in again (API tokens keep working)",
              highlight=False)
    err.print("set GPUFLEET_SECRET_KEY on every API server to the value below and restart them:", highlight=False)
    print(_new_secret())


def register(app: typer.Typer) -> None:
    app.add_typer(secret_app, name="secret")
