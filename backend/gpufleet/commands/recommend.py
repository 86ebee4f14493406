"""`gpufleet recommend`: a training's memory estimate and the GPU sets that can hold it.

Asks a server (``--server``, default ``$GPUFLEET_SERVER``) through
``gpufleet.client``, like every server command. ``--local`` reads the fleet
from the database the server uses (and the live samples from Redis in a
fleet) instead, like an operator tool; nothing is written, and a missing
SQLite database is reported rather than created.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.table import Table
from rich.text import Text

from gpufleet.commands.tables import ServerOpt, fmt_size, labelled, make_console
from gpufleet.devices.device import index_list

if TYPE_CHECKING:
    from rich.console import Console

    from gpufleet.wire.selection import RecommendationPublic


def _fail(message: str) -> NoReturn:
    make_console(stderr=True).print(labelled("error:", message), highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _from_server(server: str | None, recipe: str | None, values: dict[str, Any], memory: int | None,
                 **kw: Any) -> RecommendationPublic:
    from gpufleet.client import Client, GpufleetError, ServerUnreachable

    try:
        with Client(server) as c:
            if memory is not None:  # one's own code: the memory one rank needs, as given
                return c.recommend(memory_mb=-(-memory // 2**20), **kw)
            return c.recommend(recipe=recipe, config=values, **kw)
    except ServerUnreachable as exc:
        _fail(f"{exc}; start it with `gpufleet serve`, pass --server, or use --local to read the database here")
    except (GpufleetError, ValueError) as exc:
        _fail(str(exc))


def _from_database(recipe: str | None, values: dict[str, Any], memory: int | None, *, count: int, host: str | None,
                   exclusive: bool, policy: str, max_candidates: int) -> RecommendationPublic:
    """The same answer computed here, from the database the server uses (read only)."""
    from gpufleet.wire.selection import CandidatePublic, RecommendationPublic, estimate_public
    from gpufleet.config import ConfigError, get_settings
    from gpufleet.scheduling.memory import EstimateError

    try:
        from gpufleet.db.session import missing_sqlite_file, session_scope

        settings = get_settings()
        # Opening SQLite creates the file: a read must not leave an empty database behind.
        missing = missing_sqlite_file(settings)
        if missing is not None:
            _fail(f"no database at {missing}: run `gpufleet serve` (or `gpufleet db upgrade`) first, "
                  "set GPUFLEET_DATABASE_URL to the server's database, or drop --local to ask a server")
        from gpufleet.scheduling.plan import SelectionPlan, plan_selection

        with session_scope(settings) as sess:
            if memory is not None:
                from gpufleet.scheduling.inputs import fleet_state
                from gpufleet.scheduling.recommend import SelectionRequest, recommend

                req = SelectionRequest(memory_bytes=memory, count=count, host=host, exclusive=exclusive,
                                       policy=policy, max_candidates=max_candidates)  # type: ignore[arg-type]
                fleet = fleet_state(sess, settings, settings, settings, settings, host=host)
                plan = SelectionPlan(estimate=None, recommendation=recommend(req, fleet))
            else:
                plan = plan_selection(sess, settings, recipe, values, count=count, host=host, exclusive=exclusive,
                                      policy=policy, max_candidates=max_candidates)  # type: ignore[arg-type]
    except (ConfigError, EstimateError, ValueError) as exc:
        _fail(str(exc))
    except Exception as exc:  # the database may be missing or not migrated
        if type(exc).__module__.startswith("sqlalchemy"):
            _fail(f"cannot read the fleet from the database ({type(exc).__name__}); run `gpufleet db upgrade` "
                  "or set GPUFLEET_DATABASE_URL to the server's database")
        raise
    rec = plan.recommendation
    if rec.refused:
        _fail(f"this training can never be placed: {rec.refused}")
    return RecommendationPublic(
        memory_bytes=rec.request.memory_bytes, count=count, host=host, policy=policy,
        candidates=[CandidatePublic(host=c.host, gpu_indexes=list(c.gpu_indexes), score=c.score,
                                    connection=c.connection, reasons=list(c.reasons),
                                    free_memory=list(c.free_memory), weights=list(c.weights))
                    for c in rec.candidates],
        wait_reason=rec.wait_reason, estimate=estimate_public(plan.estimate) if plan.estimate else None,
    )


def recommend(
    recipe: Annotated[str | None, typer.Option("--recipe", help="recipe name, e.g. sae or mlp")] = None,
    memory: Annotated[str | None, typer.Option("--memory", help="instead of --recipe, for your own code: the "
                                                                "memory one rank needs, e.g. 40GiB")] = None,
    config: Annotated[Path | None, typer.Option("--config", help="YAML/JSON file of recipe fields")] = None,
    count: Annotated[int | None, typer.Option("--count", min=1, max=64, help="GPUs (one DDP rank each; "
                                                                         "default 1, with --fit: tried)")] = None,
    host: Annotated[str | None, typer.Option("--host", help="only this host")] = None,
    policy: Annotated[str, typer.Option("--policy", help="pack (best fit) or spread")] = "pack",
    shared: Annotated[bool, typer.Option("--shared", help="may share GPUs with other small trainings")] = False,
    top: Annotated[int, typer.Option("--top", min=1, max=50, help="how many sets to show")] = 5,
    sets: Annotated[list[str] | None, typer.Option("--set", help="FIELD=VALUE, over the file")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON for scripts")] = False,
    server: ServerOpt = None,
    local: Annotated[bool, typer.Option("--local", help="read the fleet from the database here instead of "
                                                        "asking a server")] = False,
    fit_: Annotated[bool, typer.Option("--fit", help="choose the layout: how many GPUs, DDP or FSDP, the "
                                                     "largest micro-batch (the global batch kept)")] = False,
    pool: Annotated[str | None, typer.Option("--pool", help="on this Slurm pool's declared GPUs instead of the "
                                                            "team's hosts")] = None,
) -> None:
    """Print the memory breakdown per rank and the ranked GPU sets for a recipe's config, or for your own
    code's memory per rank (--memory). With --fit: what fits, and the layout to start it with."""
    from gpufleet.engine.config import TrainingConfigError
    from gpufleet.engine.config import parse_overrides, read_config_file

    from gpufleet.trainings.script import ScriptError, parse_memory

    if (recipe is None) == (memory is None):
        _fail("give --recipe (a built-in recipe's config is estimated) or --memory (your own code), not both")
    try:
        mem_bytes = parse_memory(memory)
    except ScriptError as exc:
        _fail(f"--{exc}")
    if policy not in ("pack", "spread"):
        _fail(f"--policy must be pack or spread, not {policy!r}")
    try:
        values: dict[str, Any] = read_config_file(config) if config else {}
        values.update(parse_overrides(sets or []))
    except (TrainingConfigError, ValueError) as exc:
        _fail(str(exc))
    if fit_:
        if recipe is None:
            _fail("--fit lays out a recipe's config: give --recipe (your own code's memory is what you declare)")
        if local:
            _fail("--fit traces each layout in a server's estimate processes: drop --local")
        if pool and host:
            _fail("--pool fits on a Slurm pool's GPUs and --host on one of the team's hosts: give one")
        _fit(server, recipe, values, count, host, as_json, pool)
        return
    if pool and (host or local):
        _fail("--pool answers for a Slurm pool's GPUs, from the server: drop " + ("--host" if host else "--local"))
    count = count or 1
    kw: dict[str, Any] = dict(count=count, host=host, exclusive=not shared, policy=policy, max_candidates=top)
    rec = (_from_database(recipe, values, mem_bytes, **kw) if local
           else _from_server(server, recipe, values, mem_bytes, **kw, **({"pool": pool} if pool else {})))
    if as_json:
        typer.echo(json.dumps(rec.model_dump(mode="json"), indent=2))
        raise typer.Exit(0)
    console = make_console()
    if rec.estimate is None:
        console.print(f"your own code on {count} GPU(s), {fmt_size(mem_bytes or 0)} per rank", highlight=False)
        _candidates(console, rec)
        return
    est = rec.estimate
    console.print(Text.assemble((recipe, "bold"), f" on {count} GPU(s), {est.strategy}, {est.precision}, "
                                f"micro-batch {est.micro_batch_size} per rank: {est.summary}"), highlight=False)
    breakdown = Table(show_header=True, header_style="bold")
    breakdown.add_column("per rank")
    breakdown.add_column("bytes", justify="right")
    for name, value in breakdown_rows(est.breakdown):
        breakdown.add_row(name, fmt_size(value))
    breakdown.add_row(Text("total", style="bold"), Text(fmt_size(est.total), style="bold"))
    console.print(breakdown)
    # Folded at the terminal's width (whole in a pipe): the method says how the figures were found.
    console.print(f"method: {est.method}", highlight=False)
    _candidates(console, rec)


def _fit(server: str | None, recipe: str, values: dict[str, Any], count: int | None, host: str | None,
         as_json: bool, pool: str | None = None) -> None:
    from gpufleet.client import Client, GpufleetError, ServerUnreachable

    try:
        # Every layout tried is traced on the server: minutes for a large model on a busy machine.
        with Client(server, timeout=600.0) as c:
            answer = c.fit(recipe, values, count=count, host=host, pool=pool)
    except ServerUnreachable as exc:
        _fail(f"{exc}; start it with `gpufleet serve` or pass --server")
    except (GpufleetError, ValueError) as exc:
        _fail(str(exc))
    if as_json:
        typer.echo(json.dumps(answer.model_dump(mode="json"), indent=2))
        return
    from gpufleet.commands.tables import Column, print_table

    console = make_console()
    columns = [Column("GPUs", justify="right"), Column("strategy"), Column("micro-batch", justify="right"),
               Column("accum", justify="right"), Column("per rank", justify="right"), Column("fits"),
               Column("where", shorten=True, min_width=12)]
    rows = [[str(o.world_size), o.strategy, str(o.micro_batch_size), str(o.grad_accum_steps),
             fmt_size(o.memory_bytes), o.fits,
             f"pool {o.pool}" if o.pool else
             f"{o.host}: {index_list(o.gpu_indexes)}" if o.fits == "now" else o.reason]
            for o in answer.options]
    print_table(console, columns, rows, title=f"{recipe}, global batch {answer.global_batch_size}: the largest "
                                              "micro-batch per rank that fits, per layout tried")
    for line in answer.never:
        console.print(labelled("never:", line, style="yellow"), highlight=False)
    if answer.pick is None:
        console.print(labelled("nothing fits:", answer.why, style="yellow"), highlight=False)
        raise typer.Exit(1)
    p = answer.pick
    console.print(labelled("pick:", answer.why, style="bold"), highlight=False)
    sets = " ".join(f"--set {k}={v}" for k, v in p.config.items())
    if p.pool:
        gpus = f" --pool {p.pool} --world-size {p.world_size}"
    else:
        gpus = f" --gpus {p.world_size}" if p.world_size > 1 else ""
    console.print(f"start it: gpufleet train --recipe {recipe}{gpus} {sets}", highlight=False, soft_wrap=True)


def _candidates(console: Console, rec: RecommendationPublic) -> None:
    if rec.pool is not None:
        _on_pool(console, rec)
        return
    if not rec.candidates:
        console.print(labelled("nothing fits now:", rec.wait_reason, style="yellow"), highlight=False)
        return
    table = Table(show_header=True, header_style="bold")
    for col in ("#", "host", "GPUs", "link", "score", "why"):
        table.add_column(col)
    for i, (c, gpus, why) in enumerate(collapse_equal(rec.candidates), 1):
        table.add_row(str(i), c.host, gpus, c.connection, f"{c.score:.0f}", why)
    console.print(table)


def _on_pool(console: Console, rec: RecommendationPublic) -> None:
    """A pool's answer: the layout Slurm is asked for, the partition's nodes now, and the command that sends it."""
    p = rec.pool
    assert p is not None
    console.print(f"pool {p.pool}: {rec.count} x {p.gpu_model or 'GPU'} ({fmt_size(p.gpu_memory)} each) hold it, "
                  f"{p.gpus_per_node} on each of {p.nodes} node(s); Slurm decides when and where it starts",
                  highlight=False)
    if p.partition_nodes is None:
        console.print(labelled("Slurm did not answer:", "the partition's nodes are not shown", style="yellow"),
                      highlight=False)
    else:
        table = Table(show_header=True, header_style="bold")
        for col in ("node", "state", "gpus", "in use"):
            table.add_column(col)
        for n in p.partition_nodes:
            table.add_row(n.name, n.state, n.gres, n.gres_used)
        console.print(table)
    what = f"--world-size {rec.count}" if rec.estimate is not None else f"--gpus {rec.count}"
    console.print(f"send it there: gpufleet {'train' if rec.estimate is not None else 'run'} ... --pool {p.pool} "
                  f"{what}", highlight=False)


def breakdown_rows(breakdown: dict[str, int]) -> list[tuple[str, int]]:
    """The estimate's parts as the table shows them.

    Under DDP the gradients are views into its buckets (gradient_as_bucket_view),
    so the estimate counts them once, as the buckets, and its gradients are 0:
    shown as one row rather than "gradients 0" beside the buckets.
    """
    parts = dict(breakdown)
    rows = []
    for name, value in parts.items():
        if name == "gradients" and not value and parts.get("ddp_buckets"):
            rows.append(("gradients (DDP buckets)", parts["ddp_buckets"]))
        elif name == "ddp_buckets" and not parts.get("gradients") and value:
            continue
        else:
            rows.append((name.replace("_", " "), value))
    return rows


_GPU_NAMES = re.compile(r"^GPUs? [\d, ]+ ")


def collapse_equal(candidates: list[Any]) -> list[tuple[Any, str, str]]:
    """(first candidate, GPUs cell, why cell) per group of equal candidates.

    On a host of identical free GPUs every single GPU (or every set alike) scores
    the same for the same reason; one row says so ("0 | 1 | 2 | 3: equal")
    instead of repeating it once per GPU.
    """
    groups: dict[tuple, list[Any]] = {}
    for c in candidates:
        same = (c.host, c.connection, round(c.score), _GPU_NAMES.sub("", c.reasons[0]) if c.reasons else "",
                tuple(c.reasons[1:]))
        groups.setdefault(same, []).append(c)
    out = []
    for members in groups.values():
        first = members[0]
        gpus = " | ".join(index_list(m.gpu_indexes) for m in members)
        why = "; ".join(first.reasons)
        if len(members) > 1 and first.reasons:
            rest = "; ".join([_GPU_NAMES.sub("", first.reasons[0]), *first.reasons[1:]])
            why = f"{len(members)} equal choices; each {rest}"
        out.append((first, gpus, why))
    return out


def register(app: typer.Typer) -> None:
    app.command("recommend")(recommend)
