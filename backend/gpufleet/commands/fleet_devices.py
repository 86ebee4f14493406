"""``gpufleet gpus`` and ``gpufleet topology`` read from a server: every host's GPUs, grouped by host.

Used when a server is named (``--server``, ``$GPUFLEET_SERVER``) or this machine
has one's socket; ``--local`` reads this machine's devices instead
(:mod:`gpufleet.commands.devices`).
"""

from __future__ import annotations

import json
from itertools import groupby

import typer
from rich.text import Text

from gpufleet.commands.tables import SERVER_HELP, Column, fmt_size, make_console, print_table, print_tsv

COLUMNS = (
    Column("ID", justify="right"),
    Column("Vendor", drop=2),
    Column("Model", drop=1, shorten=True, min_width=10),
    Column("VRAM", justify="right"),
    Column("Free", justify="right"),
    Column("Backend", drop=3),
    Column("UUID", drop=4, shorten=True, min_width=12),
    Column("Status", shorten=True, min_width=8),
)


def asks_server(server: str | None, local: bool) -> bool:
    """Whether to read a server: one was named, or this machine runs one (its socket is there)."""
    if local:
        return False
    from gpufleet.client.client import local_socket
    from gpufleet.client.localsocket import UntrustedServer

    try:
        return bool(server) or local_socket(server) is not None
    except UntrustedServer:
        return True  # the client then refuses it, saying why, as every server command does


def _status(g: dict) -> Text:
    # The server's words are text, never markup: a reason with "[link=…]" in it is shown as written.
    text = Text("ok") if g["status"] == "ok" else Text(str(g["status"]), style="red")
    if g.get("status_reason"):
        text.append(f": {g['status_reason']}", style="red")
    if g.get("drained"):
        text.append(" ").append("drained", style="yellow")
    return text.append(" sim" if g["simulated"] else "")


POOL_COLUMNS = (
    Column("Node"),
    Column("State", shorten=True, min_width=6),
    Column("GPUs"),
    Column("In use"),
    Column("Model", drop=1, shorten=True, min_width=10),
)


def show_gpus(server: str | None, as_json: bool, wide: bool) -> None:
    from gpufleet.commands.remote import Client

    client = Client(server)
    body = client.gpus().model_dump(mode="json")
    pools = client.pools().data
    if as_json:
        body["pools"] = [p.model_dump(mode="json") for p in pools]
        typer.echo(json.dumps(body, indent=2))
        return
    console = make_console()
    if not body["data"]:
        console.print("No GPUs in the fleet (no host has registered any).", highlight=False)
    by_host = groupby(sorted(body["data"], key=lambda g: (g["host"], g["index"])), key=lambda g: g["host"])
    tables = [(host, [_row(g) for g in gpus]) for host, gpus in by_host]
    if not console.is_terminal and tables:  # one list for scripts: the host is a column
        print_tsv(console, ["Host", *(c.header for c in COLUMNS)], [[h, *r] for h, rows in tables for r in rows])
        tables = []
    for host, rows in tables:
        print_table(console, COLUMNS, rows, wide=wide, title=f"GPUs on {host}")
    _show_pools(console, pools, wide)


def _show_pools(console, pools: list, wide: bool) -> None:
    """Each pool's nodes and GPUs as Slurm reports them (docs/slurm.md)."""
    for p in pools:
        title = f"GPUs in pool {p.name} (Slurm partition {p.partition})"
        if p.error:
            console.print(f"{title}: {p.error}", highlight=False)
            continue
        rows = [[n.name, n.state, n.gres, n.gres_used, p.gpu_model or "?"] for n in p.nodes or []]
        print_table(console, POOL_COLUMNS, rows, wide=wide, title=title)


def _row(g: dict) -> list[str | Text]:
    free = (g.get("live") or {}).get("memory_free")
    return [str(g["index"]), {"nvidia": "NVIDIA", "amd": "AMD", "intel": "Intel"}.get(g["vendor"], g["vendor"]),
            g["name"], fmt_size(g["memory_total"]) if g["memory_total"] is not None else "?",
            fmt_size(free) if free is not None else "?", g["backend"], g["uuid"] or "?", _status(g)]


def show_topology(server: str | None, as_json: bool) -> None:
    from gpufleet.commands.remote import Client
    from gpufleet.devices.topology import LEGEND

    body = Client(server).topology().model_dump(mode="json")
    if as_json:
        typer.echo(json.dumps(body, indent=2))
        return
    if not body["hosts"]:
        typer.echo("No GPUs in the fleet (no host has registered any).")
        return
    for h in sorted(body["hosts"], key=lambda h: h["host"]):
        typer.echo(f"{h['host']}:")
        names = [f"GPU{i}" for i in h["gpus"]]
        width = max([len(n) for n in names] + [len(c) for row in h["matrix"] for c in row]) + 2
        typer.echo(" " * width + "".join(n.ljust(width) for n in names).rstrip())
        for name, row in zip(names, h["matrix"], strict=False):
            typer.echo(name.ljust(width) + "".join(c.ljust(width) for c in row).rstrip())
        typer.echo("")
    typer.echo(LEGEND)


def clear_health(
    gpu: str = typer.Argument(..., metavar="HOST:INDEX", help="the GPU, e.g. node-a:3"),
    server: str | None = typer.Option(None, "--server", envvar="GPUFLEET_SERVER", show_envvar=False,
                                      help=SERVER_HELP),
) -> None:
    """Put a GPU marked unhealthy (fatal XID, pending row remap, ECC errors) back in scheduling (admins)."""
    from gpufleet.commands.remote import Client, fail

    host, _, index = gpu.rpartition(":")
    if not host or not index.isdigit():
        fail(f"give the GPU as HOST:INDEX (e.g. node-a:3), not {gpu!r}")
    body = Client(server).clear_health(host, int(index))
    if body["cleared"] is None:
        typer.echo(f"GPU {body['index']} on {body['host']} had no health mark to clear (status {body['status']})")
        return
    typer.echo(f"GPU {body['index']} on {body['host']} is back in scheduling (it was out for: {body['cleared']})")
