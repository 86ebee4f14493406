"""``gpufleet top``: a live terminal view of a server's GPUs, in the spirit of nvitop.

It reads ``GET /api/v1/system/metrics/live`` through ``gpufleet.client`` from
a server, reached as every other command reaches it (``--server``, else
``$GPUFLEET_SERVER``, else this machine's server through its Unix socket, so
with no token and whatever port it listens on), every ``--interval`` seconds
and shows, per host and GPU:
utilization and memory bars, temperature, power, and who holds the GPU — the
gpufleet training and its owner, or the foreign processes and their users.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.measure import Measurement
from rich.text import Text

from gpufleet.commands.tables import Column, ServerOpt, WideOpt, fit_table, fmt_size, labelled, make_console
from gpufleet.workkinds import noun

if TYPE_CHECKING:
    from gpufleet.client import Client

BAR_WIDTH = 20
GIB = 1024**3


def _fail(message: str) -> NoReturn:
    make_console(stderr=True).print(labelled("error:", message), highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def bar(fraction: float | None, width: int = BAR_WIDTH) -> Text:
    """``█████░░░░░`` coloured by how full it is; grey dashes when unknown."""
    if fraction is None:
        return Text("─" * width, style="dim")
    f = min(1.0, max(0.0, fraction))
    filled = round(f * width)
    style = "green" if f < 0.6 else "yellow" if f < 0.85 else "red"
    return Text("█" * filled, style=style) + Text("░" * (width - filled), style="dim")


def _holder(gpu: dict[str, Any], trainings: dict[str, dict[str, Any]]) -> Text:
    procs = gpu.get("processes") or []
    parts: list[Text] = []
    job = gpu.get("job_id")
    if job:
        t = trainings.get(job, {})
        called = noun(t.get("kind"))
        what = "" if called == "training" else f"{called} "  # a training goes unnamed; a session says so
        parts.append(Text(f"{what}{t.get('name', job[:8])} ({t.get('owner', '?')})", style="bold cyan"))
        if t.get("max_steps"):
            parts[-1] += Text(f" step {t.get('step', 0)}/{t['max_steps']}", style="cyan")
    for p in procs:
        if p.get("foreign"):
            mem = f" {fmt_size(p['used_memory'])}" if p.get("used_memory") else ""
            cmd = (p.get("command") or "?").split(" ")[0].rsplit("/", 1)[-1]
            parts.append(Text(f"{p['pid']} {p.get('user') or '?'} {cmd}{mem}", style="magenta"))
    if not parts:
        return Text("idle", style="dim")
    return Text("; ").join(parts)


def bar_width_for(columns: int) -> int:
    # The other columns take about 90 characters; the two bars share the rest.
    return max(5, min(BAR_WIDTH, (columns - 90) // 2))


# At 80 columns temperature and power go first, then the model name is
# shortened; "held by" keeps what fits of the training and its owner.
TOP_COLUMNS = (
    Column("GPU", justify="right"),
    Column("name", drop=2, shorten=True, min_width=8),
    Column("util"),
    Column("memory"),
    Column("temp", drop=3, justify="right"),
    Column("power", drop=3, justify="right"),
    Column("held by", shorten=True, min_width=24),
)


def render(body: dict[str, Any], server: str, bar_width: int = BAR_WIDTH, width: int = 10_000,
           wide: bool = False) -> Group:
    """The whole screen for one ``/metrics/live`` answer, fitted to ``width`` columns."""
    gpus = body.get("gpus", [])
    trainings = body.get("trainings", {})
    agg = body.get("aggregate", {})
    used, total = agg.get("total_memory_used") or 0, agg.get("total_memory_total") or 0
    util = agg.get("average_utilization")
    title = Text(f"gpufleet top — {server}", style="bold")
    figures = Text.assemble(
        f"{agg.get('gpu_count', 0)} GPUs",
        f"   util {util:.0f}%" if util is not None else "   util –",
        f"   memory {fmt_size(used)} of {fmt_size(total)}",
        (f"   {agg['lost_count']} lost", "bold red") if agg.get("lost_count") else "",
    )
    # One line where it fits; on a narrow terminal the figures go on a line of their own.
    sep = "   " if title.cell_len + 3 + figures.cell_len <= width else "\n"
    head = Text.assemble(title, sep, figures)
    hosts: dict[str, list[dict[str, Any]]] = {}
    for g in gpus:
        hosts.setdefault(g["host"], []).append(g)
    tables: list[Any] = []
    hidden: set[str] = set()
    for host, gpu_rows in sorted(hosts.items()):
        rows: list[list[str | Text]] = []
        for g in sorted(gpu_rows, key=lambda g: g["index"]):
            name = (g.get("name") or "?").removeprefix("NVIDIA ")
            if g.get("lost"):
                rows.append([str(g["index"]), name, Text("LOST", style="bold red"), Text(g.get("error") or ""),
                             "", "", ""])
                continue
            u = g.get("utilization")
            mu, mt = g.get("memory_used"), g.get("memory_total")
            mem_frac = mu / mt if mu is not None and mt else None
            temp = g.get("temperature")
            pw, pl = g.get("power_draw"), g.get("power_limit")
            power = "–" if pw is None else f"{pw:.0f}W" + (f"/{pl:.0f}W" if pl else "")
            rows.append([
                str(g["index"]), name,
                bar(None if u is None else u / 100, bar_width) + Text(f" {u:3.0f}%" if u is not None else "    –"),
                bar(mem_frac, bar_width)
                + Text(f" {mu / GIB:4.1f}/{mt / GIB:.0f} GiB" if mem_frac is not None else "  –"),
                "–" if temp is None else f"{temp:.0f}°C", power, _holder(g, trainings),
            ])
        fitted = fit_table(TOP_COLUMNS, rows, width, wide=wide, title=host)
        hidden.update(fitted.hidden)
        tables.append(fitted.table)
    if not tables:
        tables.append(Text("no GPUs reported yet (is an agent running?)", style="dim"))
    if hidden:
        tables.append(Text(f"({', '.join(c for c in (c.header for c in TOP_COLUMNS) if c in hidden)} "
                           f"hidden to fit {width} columns; --wide shows all)", style="dim"))
    return Group(head, *tables)


def connect(server: str | None, token: str | None) -> Client:
    from gpufleet.client import Client

    try:
        return Client(server, token, timeout=5.0)
    except ValueError as exc:
        _fail(f"--server: {exc}")


def fetch(c: Client) -> dict[str, Any]:
    from gpufleet.client import Forbidden, GpufleetError, ServerUnreachable, Unauthorized

    try:
        return c.live().model_dump(mode="json")
    except ServerUnreachable as exc:
        _fail(f"{exc}; start it with `gpufleet serve` or pass --server")
    except (Unauthorized, Forbidden) as exc:
        _fail(f"{c.server} needs sign-in ({exc.status}: {exc.message}): set GPUFLEET_TOKEN or pass --token")
    except GpufleetError as exc:
        _fail(f"{c.server} answered: {exc}")


def top(
    server: ServerOpt = None,
    interval: Annotated[float, typer.Option(help="seconds between refreshes")] = 1.0,
    once: Annotated[bool, typer.Option("--once", help="print one frame and exit")] = False,
    token: Annotated[str | None, typer.Option(help="API token (default: GPUFLEET_TOKEN)")] = None,
    wide: WideOpt = False,
) -> None:
    """Watch a server's GPUs live: utilization, memory, temperature, power and who holds each."""
    if not 0.1 <= interval <= 3600:
        _fail(f"--interval must be between 0.1 and 3600 seconds, got {interval}")
    c = connect(server, token)
    console = make_console()

    def frame() -> Group:
        return render(fetch(c), c.server, bar_width_for(console.width), console.width, wide)

    first = frame()
    if wide:
        # Every column, wider than the terminal if need be: it scrolls instead of folding cells.
        need = Measurement.get(console, console.options.update(max_width=10_000), first).maximum
        console = Console(width=max(console.width, need), markup=False)
    if once:
        console.print(first)
        return
    with Live(first, console=console, screen=False, refresh_per_second=4) as live:
        try:
            while True:
                time.sleep(interval)
                live.update(frame())
        except KeyboardInterrupt:
            pass


def register(app: typer.Typer) -> None:
    app.command("top")(top)
