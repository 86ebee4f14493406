"""``gpufleet gpus`` and ``gpufleet topology``: what this machine's GPUs are and how they connect.

Both read local detection (this machine, or the simulated fleet when
``GPUFLEET_SIMULATE`` is set), not the database, so they work before
``serve`` has ever run. ``gpus`` is a sub-app so that other commands can
hang under it (``gpufleet gpus drain``); with no sub-command it lists.
"""

from __future__ import annotations

import json
from typing import Annotated, NoReturn

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from gpufleet.config import ConfigError, Settings, get_settings

gpus_app = typer.Typer(
    help="List this machine's GPUs (and manage them with sub-commands).",
    invoke_without_command=True,
)

JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON for scripts instead of a table")]


def _fail(message: str) -> NoReturn:
    Console(stderr=True).print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _settings() -> Settings:
    try:
        return get_settings()
    except ConfigError as exc:
        _fail(str(exc))


def _gib(n: int | None) -> str:
    return f"{n / 2**30:.0f} GB" if n is not None else "?"


def _no_gpus_line(settings: Settings) -> str:
    return (
        f"No GPUs found on {settings.host_name} (no NVIDIA driver, ROCm or XPU device). "
        "Trainings run on the CPU; GPUFLEET_SIMULATE=4xH100-80GB simulates a fleet."
    )


@gpus_app.callback()
def gpus(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """List this machine's GPUs: ID, vendor, model, memory, backend, UUID."""
    if ctx.invoked_subcommand is not None:
        return
    from gpufleet.devices import detect_gpus

    settings = _settings()
    found = detect_gpus(settings)
    if as_json:
        payload = {
            "host": settings.host_name,
            "simulated": bool(settings.simulate),
            "gpus": [g.to_dict() for g in found],
        }
        typer.echo(json.dumps(payload, indent=2))
        return
    console = Console()
    if not found:
        console.print(_no_gpus_line(settings), highlight=False)
        return
    title = f"GPUs on {settings.host_name}"
    if settings.simulate:
        title += f" (simulated: {settings.simulate}, {settings.simulate_topology})"
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    # Narrow terminals fold the UUID and wrap the model name; the short
    # columns never wrap.
    table.add_column("ID", no_wrap=True)
    table.add_column("Vendor", no_wrap=True)
    table.add_column("Model", min_width=10)
    table.add_column("VRAM", no_wrap=True, justify="right")
    table.add_column("Free", no_wrap=True, justify="right")
    table.add_column("Backend", no_wrap=True)
    table.add_column("UUID", overflow="fold", min_width=10)
    table.add_column("Status")
    for g in found:
        status = "ok" if g.healthy else f"[red]unhealthy: {g.error}[/]"
        if g.simulated:
            status += " sim"
        table.add_row(
            str(g.index),
            {"nvidia": "NVIDIA", "amd": "AMD", "intel": "Intel"}.get(g.vendor, g.vendor),
            g.name or "?",
            _gib(g.memory_total),
            _gib(g.memory_free),
            g.label,
            g.uuid or "?",
            status,
        )
    console.print(table)


def topology(as_json: JsonOpt = False) -> None:
    """Show how this machine's GPUs connect (NVLink, PCIe level, peer access), like `nvidia-smi topo -m`."""
    from gpufleet.devices import detect_gpus, detect_topology, format_matrix
    from gpufleet.devices.topology import LEGEND, peer_pairs

    settings = _settings()
    found = detect_gpus(settings)
    topo = detect_topology(settings, found)
    if as_json:
        payload = {"host": settings.host_name, "simulated": bool(settings.simulate), **topo.to_dict()}
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
