"""``gpufleet gpus`` and ``gpufleet topology``: what the fleet's GPUs are and how they connect.

Both ask a server when one is named (``--server``, ``$GPUFLEET_SERVER``) or
this machine runs one (its socket), every host grouped
(:mod:`gpufleet.commands.fleet_devices`). With ``--local``, or with no server
at all, they read local detection (this machine, or the simulated fleet when
``GPUFLEET_SIMULATE`` is set), so they work before ``serve`` has ever run. ``gpus`` is a sub-app so that other
commands can hang under it (``gpufleet gpus drain``); with no sub-command it lists.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.text import Text

from gpufleet.commands import drain, fleet_devices
from gpufleet.commands.tables import Column, ServerOpt, WideOpt, fmt_size, labelled, make_console, print_table

if TYPE_CHECKING:
    from gpufleet.config import Settings

gpus_app = typer.Typer(
    help="List the fleet's GPUs by host, or this machine's with --local (and manage them with sub-commands).",
    invoke_without_command=True,
)

# Draining works on the database, not on local detection; it lives in its own module.
gpus_app.command("drain")(drain.drain)
gpus_app.command("undrain")(drain.undrain)
gpus_app.command("clear-health")(fleet_devices.clear_health)

JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON for scripts instead of a table")]
LocalOpt = Annotated[bool, typer.Option("--local", help="this machine's devices, not the server's fleet")]


def _fail(message: str) -> NoReturn:
    make_console(stderr=True).print(labelled("error:", message), highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _settings() -> Settings:
    from gpufleet.config import ConfigError, get_settings

    try:
        return get_settings()
    except ConfigError as exc:
        _fail(str(exc))


def _no_gpus_line(settings: Settings) -> str:
    return (
        f"No GPUs found on {settings.host_name} (no NVIDIA driver, ROCm or XPU device). "
        "Trainings run on the CPU; GPUFLEET_SIMULATE=4xH100-80GB simulates a fleet."
    )


@gpus_app.callback()
def gpus(ctx: typer.Context, as_json: JsonOpt = False, wide: WideOpt = False, local: LocalOpt = False,
         server: ServerOpt = None) -> None:
    """List the fleet's GPUs by host (or this machine's): ID, vendor, model, memory, backend, UUID, status."""
    if ctx.invoked_subcommand is not None:
        return
    if fleet_devices.asks_server(server, local):
        fleet_devices.show_gpus(server, as_json, wide)
        return
    from gpufleet.devices.backend import device_backend

    settings = _settings()
    backend = device_backend(settings)
    found = backend.detect_gpus()
    if as_json:
        payload = {
            "host": settings.host_name,
            "simulated": backend.simulated,
            "gpus": [g.to_dict() for g in found],
        }
        typer.echo(json.dumps(payload, indent=2))
        return
    console = make_console()
    if not found:
        console.print(_no_gpus_line(settings), highlight=False)
        return
    title = f"GPUs on {settings.host_name}"
    if backend.description:
        title += f" ({backend.description})"
    rows = []
    for g in found:
        status = Text("ok") if g.healthy else Text(f"unhealthy: {g.error}", style="red")
        if g.simulated:
            status.append(" sim")
        rows.append([
            str(g.index),
            {"nvidia": "NVIDIA", "amd": "AMD", "intel": "Intel"}.get(g.vendor, g.vendor),
            g.name or "?",
            fmt_size(g.memory_total) if g.memory_total is not None else "?",
            fmt_size(g.memory_free) if g.memory_free is not None else "?",
            g.label,
            g.uuid or "?",
            status,
        ])
    print_table(console, GPU_COLUMNS, rows, wide=wide, title=title)


# At 80 columns the UUID goes first, then the backend and vendor; the model
# name is shortened last.
GPU_COLUMNS = (
    Column("ID", justify="right"),
    Column("Vendor", drop=2),
    Column("Model", drop=1, shorten=True, min_width=10),
    Column("VRAM", justify="right"),
    Column("Free", justify="right"),
    Column("Backend", drop=3),
    Column("UUID", drop=4, shorten=True, min_width=12),
    Column("Status", shorten=True, min_width=8),
)


def topology(as_json: JsonOpt = False, local: LocalOpt = False, server: ServerOpt = None) -> None:
    """Show how each host's GPUs connect (NVLink, PCIe level, peer access), like `nvidia-smi topo -m`."""
    if fleet_devices.asks_server(server, local):
        fleet_devices.show_topology(server, as_json)
        return
    from gpufleet.devices.backend import device_backend
    from gpufleet.devices.topology import LEGEND, format_matrix, peer_pairs

    settings = _settings()
    backend = device_backend(settings)
    found = backend.detect_gpus()
    topo = backend.detect_topology(found)
    if as_json:
        payload = {"host": settings.host_name, "simulated": backend.simulated, **topo.to_dict()}
        payload["peer_pairs"] = [list(p) for p in peer_pairs(topo)]
        typer.echo(json.dumps(payload, indent=2))
        return
    if not found:
        typer.echo(_no_gpus_line(settings))
        return
    typer.echo(format_matrix(topo))
    typer.echo("")
    for g in found:
        typer.echo(f"GPU{g.index}: {g.label}  {g.name or '?'}" + ("" if g.healthy else f"  (unhealthy: {g.error})"))
    pairs = peer_pairs(topo)
    typer.echo("Peer access: " + (", ".join(f"GPU{a}-GPU{b}" for a, b in pairs) or "none"))
    typer.echo("")
    typer.echo(LEGEND)


def register(app: typer.Typer) -> None:
    """Add ``gpus`` (a sub-app) and ``topology`` to the main CLI."""
    app.add_typer(gpus_app, name="gpus")
    app.command("topology")(topology)
