"""`gpufleet gpus drain|undrain`: take GPUs out of scheduling and put them back.

An operator tool that works on the server's database directly (like
`gpufleet db`), so it works while the API is down or being upgraded; anyone
who can reach the database is an operator already. Over HTTP, the same change
belongs to an admin. Draining stops new placements; trainings already on the
GPU keep running.
"""

from __future__ import annotations

from typing import Annotated, NoReturn

import typer

from gpufleet.commands.tables import labelled, make_console
from gpufleet.devices.device import index_list

GpuArgs = Annotated[list[int], typer.Argument(help="GPU indexes on the host, e.g. 0 3")]
HostOpt = Annotated[str | None, typer.Option("--host", help="host name (default: this machine)")]


def _fail(message: str) -> NoReturn:
    make_console(stderr=True).print(labelled("error:", message), highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _set_drained(indexes: list[int], host: str | None, drained: bool, reason: str | None) -> None:
    from gpufleet.config import ConfigError, get_settings
    from gpufleet.db.session import write_session
    from gpufleet.scheduling.drain import DrainError, set_drained

    try:
        settings = get_settings()
    except ConfigError as exc:
        _fail(str(exc))
    name = host or settings.host_name
    try:
        with write_session(settings) as sess:
            result = set_drained(sess, name, indexes, drained, reason)
    except DrainError as exc:
        hint = " (use --host)" if "not registered" in str(exc) else ""
        _fail(f"{exc}{hint}")
    except Exception as exc:  # a database that cannot be reached or is not migrated
        if type(exc).__module__.startswith("sqlalchemy"):
            _fail(f"cannot update the database ({type(exc).__name__}: {str(exc).splitlines()[0]}); "
                  "run `gpufleet db upgrade` or set GPUFLEET_DATABASE_URL")
        raise
    verb = "drained" if drained else "undrained"
    typer.echo(f"{verb} GPU {index_list(indexes, ', ')} on {name}" + (f" ({reason})" if drained and reason else ""))
    for idx, tname in result.still_running:
        typer.echo(f"GPU {idx}: training {tname} keeps running; no new training will be placed there")


def drain(gpus: GpuArgs, host: HostOpt = None,
          reason: Annotated[str | None, typer.Option("--reason", help="shown with the GPU's state")] = None) -> None:
    """Stop placing trainings on these GPUs (running ones continue)."""
    _set_drained(gpus, host, True, reason)


def undrain(gpus: GpuArgs, host: HostOpt = None) -> None:
    """Let the scheduler place trainings on these GPUs again."""
    _set_drained(gpus, host, False, None)
