"""`gpufleet secret` (a new value for GPUFLEET_SECRET_KEY) and `gpufleet secret rotate`.

Every dashboard cookie names a row in the server's database, so ending those
rows signs every browser out at once, with no restart; the new secret then
makes the old signatures worthless too once the servers run with it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from gpufleet.commands import users

secret_app = typer.Typer(help="The server's signing secret (GPUFLEET_SECRET_KEY).")
err = Console(stderr=True, markup=False)


def _new_secret() -> str:
    import secrets as _secrets

    return _secrets.token_urlsafe(48)


@secret_app.callback(invoke_without_command=True)
def secret(ctx: typer.Context) -> None:
    """Print a new random value for GPUFLEET_SECRET_KEY (384 bits); `rotate` also signs everyone out."""
    if ctx.invoked_subcommand is None:
        print(_new_secret())


@secret_app.command("rotate")
def secret_rotate(
    write: Annotated[Path | None, typer.Option(
        "--write", metavar="FILE",
        help="Write the new secret into FILE (0600) instead of printing it; "
             "by default the file GPUFLEET_SECRET_KEY_FILE names, when it is set.")] = None,
) -> None:
    """End every dashboard session now, and give the servers a new secret (written to its file, or printed)."""
    from gpufleet.secretfiles import file_for
    from gpufleet.users.signin import end_sessions

    named = file_for("secret_key")
    target = write or (named[1] if named and named[0] == "GPUFLEET_SECRET_KEY_FILE" else None)
    value = _new_secret()
    if target is not None:
        _write_secret(target, value)  # before the sessions end: a file we cannot write changes nothing
    ended = users.run_in_session(end_sessions)
    err.print(f"ended {ended} dashboard session(s): every browser must sign in again (API tokens keep working)",
              highlight=False)
    if target is not None:
        err.print(f"wrote the new secret to {target}: restart every API server that reads it", highlight=False)
        return
    err.print("set GPUFLEET_SECRET_KEY on every API server to the value below and restart them:", highlight=False)
    print(value)


def _write_secret(path: Path, value: str) -> None:
    """Replace ``path`` with ``value`` at once (a reader sees the old or the new secret), mode 0600."""
    import os

    tmp = path.with_name(f".{path.name}.new")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(value + "\n")
            f.flush()
            os.fsync(f.fileno())
        if path.exists():  # keep the owner a service account reads it as
            st = path.stat()
            os.chown(tmp, st.st_uid, st.st_gid)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        err.print(f"cannot write the new secret to {path}: {exc.strerror}; nothing was changed", highlight=False)
        raise typer.Exit(1) from None


def register(app: typer.Typer) -> None:
    app.add_typer(secret_app, name="secret")
