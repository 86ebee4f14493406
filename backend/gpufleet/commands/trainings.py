"""`gpufleet trainings ls | show | logs [--follow] | cancel` (resume, files, download: training_files), and submitting.

These talk to a server over its REST API (``--server``, default
``$GPUFLEET_SERVER``, else this machine's server through its socket), sending
``Authorization: Bearer $GPUFLEET_TOKEN`` when that is set.
"""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from gpufleet.commands.tables import (
    Column,
    ServerOpt,
    WideOpt,
    labelled,
    fmt_loss,
    fmt_size,
    progress_text,
    make_console,
    print_lines,
    print_table,
)
from gpufleet.devices.device import index_list

if TYPE_CHECKING:
    from gpufleet.commands.remote import Client

trainings_app = typer.Typer(help="Trainings on a gpufleet server.", no_args_is_help=True)
out = make_console()
err = make_console(stderr=True)

TrainingArg = Annotated[str, typer.Argument(
    metavar="TRAINING", help="the training's ID, the start of it that `trainings ls` shows (any unique prefix), "
                             "or its name")]


def register(app: typer.Typer) -> None:
    app.add_typer(trainings_app, name="trainings")


def fail(message: str) -> NoReturn:
    err.print(labelled("error:", message), highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def connect(server: str | None) -> Client:
    """A client of the server (loaded only now: it brings httpx and the API's schemas)."""
    from gpufleet.commands.remote import Client

    return Client(server)


def dump(model: Any) -> dict[str, Any]:
    return model.model_dump(mode="json")


def _short(tid: str) -> str:
    return tid[:8]


def _host(t: dict[str, Any]) -> str:
    """The host, or every host of a training across hosts (rank 0's first)."""
    if t.get("hosts"):
        return "+".join(h["host"] for h in t["hosts"])
    return t["host_name"] or "-"


def _gpus(t: dict[str, Any]) -> str:
    if t.get("hosts"):
        return "+".join(index_list(h["gpu_ids"]) for h in t["hosts"])
    if t.get("gpu_ids"):
        return index_list(t["gpu_ids"])
    return f"auto×{t['world_size']}"


@trainings_app.command("ls")
def ls(
    server: ServerOpt = None,
    status: Annotated[list[str] | None, typer.Option("--status", help="repeatable: queued, running, ...")] = None,
    owner: Annotated[str | None, typer.Option("--owner")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=500)] = 50,
    wide: WideOpt = False,
) -> None:
    """List trainings, newest first."""
    # The page as the server sent it: building the typed shapes (13 models) would cost this command
    # more than its request does, and a table needs only the fields' text.
    from gpufleet.client.client import API

    params = {"status": status or None, "owner": owner or None, "limit": limit}
    page = connect(server).request("GET", f"{API}/trainings", params={k: v for k, v in params.items() if v})
    rows = [
        [t["id"], t["name"], t["owner"], t["status"], _host(t), _gpus(t),
         progress_text(t), t["status_reason"] or t["wait_reason"] or ""]
        for t in page["data"]
    ]
    if out.is_terminal:
        for row in rows:
            row[0] = _short(row[0])
        print_table(out, LS_COLUMNS, rows, wide=wide)
        out.print(f"{len(rows)} of {page['count']}", highlight=False, emoji=False)
    else:
        for row in ([c.header for c in LS_COLUMNS], *rows):
            print("\t".join(row))


# At 80 columns the reason is shortened and dropped first, then the host.
LS_COLUMNS = (
    Column("ID"),
    Column("NAME", shorten=True, min_width=12),
    Column("OWNER", drop=2, shorten=True, min_width=8),
    Column("STATUS"),
    Column("HOST", drop=3, shorten=True, min_width=8),
    Column("GPUS", drop=1),
    Column("STEP", justify="right"),
    Column("REASON", drop=4, shorten=True, min_width=20),
)


def show_fields(t: dict[str, Any]) -> list[tuple[str, str]]:
    """``trainings show``'s lines: sizes in binary units, the loss to 4 significant digits."""
    measured = t.get("measured_peak_memory")
    return [
        ("id", t["id"]), ("name", t["name"]), ("owner", t["owner"]), ("recipe", t["recipe"]),
        ("status", t["status"] + (f" — {t['status_reason']}" if t["status_reason"] else "")),
        ("waiting", t["wait_reason"] or "-"), ("host", _host(t)), ("gpus", _gpus(t)),
        ("ranks", f"{t['world_size']}, DDP" if t["distributed"] else f"{t['world_size']}, not distributed"),
        ("step", f"{progress_text(t)}  loss {fmt_loss(t['last_loss'])}"),
        ("restarts", f"{t['restarts']}/{t['max_restarts']} (attempt {t['attempt']})"),
        ("sharing", sharing_line(t)),
        ("checkpoint", t["last_checkpoint"] or "-"),
        *([("started from", f"training {t['resumed_from']}'s checkpoint")] if t.get("resumed_from") else []),
        ("selection", selection_line(t.get("selection"))),
        ("memory", f"estimate {fmt_size(t['memory_estimate'])}, measured peak {fmt_size(measured)}"),
    ]


def selection_line(selection: dict[str, Any] | None) -> str:
    """Which GPUs were chosen, by whom, and why, in words (the API gives it as an object)."""
    if not selection:
        return "-"
    chosen = selection.get("chosen")
    parts = [f"GPUs {index_list(chosen, ', ')}" if chosen else "no GPUs yet"]
    if selection.get("by"):
        parts.append(f"by {selection['by']}")
    text = " ".join(parts)
    if selection.get("reason"):
        text += f": {selection['reason']}"
    rest = {k: v for k, v in selection.items() if k not in ("chosen", "by", "reason") and v not in (None, [], {})}
    return text + "".join(f"; {k.replace('_', ' ')} {v}" for k, v in rest.items())


def sharing_line(t: dict[str, Any]) -> str:
    """Preemptible or not, who preempts it, and whether its GPUs sit idle."""
    parts = [f"priority {t.get('priority', 0)}", "preemptible" if t.get("preemptible", True) else "not preemptible"]
    if t.get("preempted_by"):
        parts.append(f"preempted by {_short(str(t['preempted_by']))}")
    if t.get("idle_warned_at"):
        parts.append(f"GPUs idle since {str(t.get('idle_since') or t['idle_warned_at'])[:19]}")
    return ", ".join(parts)


def host_lines(t: dict[str, Any], rank_times: list[float] | None) -> list[tuple[str, str]]:
    """A training across hosts: one line per host, its ranks, GPUs, state and newest step time per rank."""
    out = []
    for h in t.get("hosts") or []:
        ranks = h["ranks"]
        times = ""
        if rank_times and ranks and ranks[-1] < len(rank_times):
            times = "  step " + " ".join(f"r{r}={rank_times[r] * 1e3:.0f}ms" for r in ranks)
        out.append((f"host {h['node_rank']}", f"{h['host']}: ranks {ranks[0]}-{ranks[-1]} on GPUs "
                    f"{index_list(h['gpu_ids'])} ({h['status']}){times}" + (
                        f" — {h['message']}" if h.get("message") else "")))
    return out


@trainings_app.command("show")
def show(training_id: TrainingArg, server: ServerOpt = None,
         as_json: Annotated[bool, typer.Option("--json", help="print the training as JSON")] = False,
         events_shown: Annotated[int, typer.Option("--events", min=0, help="how many of the newest events to list "
                                                   "(0: all of them)")] = 10) -> None:
    """One training: GPUs, host(s), estimate and reasons, restarts, newest checkpoint, recent events."""
    c = connect(server)
    training_id = c.training_id(training_id)
    t = dump(c.get_training(training_id))
    if as_json:
        print(json.dumps(t, indent=2))
        return
    extra: list[tuple[str, str]] = []
    if t.get("hosts"):
        steps = [m for m in dump(c.metrics(training_id, max_points=50))["data"] if m.get("rank_step_times")]
        extra = host_lines(t, steps[-1]["rank_step_times"] if steps else None)
    # Long values fold under themselves; a checkpoint path stays whole so it can be copied.
    print_lines(out, show_fields(t) + extra, label=True, whole=("checkpoint",))
    events = [dump(e) for e in c.events(training_id)]
    shown = events[-events_shown:] if events_shown else events
    if len(shown) < len(events):
        out.print(f"events: the newest {len(shown)} of {len(events)} (--events 0 lists all)", highlight=False)
    elif events:
        out.print(f"events: all {len(events)}", highlight=False)
    print_lines(out, [(f"  #{e['seq']}", e["time"][:19], e["kind"], e["reason"] or "") for e in shown])


@trainings_app.command("cancel")
def cancel(training_id: TrainingArg, server: ServerOpt = None) -> None:
    """Cancel a training (idempotent): a queued one leaves the queue, a running one is stopped."""
    t = dump(connect(server).cancel(training_id))
    state = "cancel requested; stopping every rank" if t.get("stopping") else t["status"]
    out.print(f"{t['id']}: {state}")


@trainings_app.command("logs")
def logs(
    training_id: TrainingArg,
    server: ServerOpt = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="keep printing until the training ends")] = False,
    tail: Annotated[int, typer.Option("--tail", min=0, help="start with the last N lines")] = 100,
) -> None:
    """Print the training's log (launcher and every rank); --follow shows a progress bar too."""
    c = connect(server)
    training_id = c.training_id(training_id)
    chunk = dump(c.log_chunk(training_id, tail=tail))
    sys.stdout.write(chunk["text"])
    sys.stdout.flush()
    if follow:
        code = follow_training(c, training_id, chunk["next_offset"])
        raise typer.Exit(code)


def follow_training(c: Client, training_id: str, offset: int = 0, poll_s: float = 0.5) -> int:
    """Stream the log and a progress bar until the training ends; exit code 0 only if it succeeded."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from gpufleet.client.client import FINAL_STATUSES

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True) as bar:
        task = bar.add_task("queued", total=None)
        while True:
            t = dump(c.get_training(training_id))
            chunk = dump(c.log_chunk(training_id, offset=offset))
            if chunk["next_offset"] < offset:  # the log was shortened to stay bounded
                chunk = dump(c.log_chunk(training_id, offset=0))
            if chunk["text"]:
                bar.console.print(chunk["text"], end="", markup=False, highlight=False, soft_wrap=True)
            offset = chunk["next_offset"]
            bar.update(task, description=t["status"], completed=t["step"], total=t["max_steps"])
            if t["status"] in FINAL_STATUSES and chunk["next_offset"] >= chunk["size"]:
                break
            time.sleep(poll_s)
    reason = f" — {t['status_reason']}" if t["status_reason"] else ""
    err.print(f"{t['name']}: {t['status']}{reason}", highlight=False, soft_wrap=True)
    return 0 if t["status"] == "succeeded" else 1


# `gpufleet train`'s options for the request's fields (what a refusal names).
TRAIN_OPTIONS = {"gpu_ids": "--gpu-ids", "world_size": "--gpus", "from_training": "--from", "host": "--host",
                 "hosts": "--hosts", "gpus_per_host": "--gpus-per-host", "spread": "--spread",
                 "max_runtime_s": "--max-runtime", "priority": "--priority"}


def submit(body: dict[str, Any], *, server: str | None = None, follow: bool = True) -> int:
    """POST a training; print its id; follow it when asked. Returns the exit code."""
    c = connect(server)
    c.options = TRAIN_OPTIONS
    from pydantic import ValidationError

    from gpufleet.wire.training_requests import TrainingCreate
    from gpufleet.client.errors import describe_detail

    try:
        request = TrainingCreate.model_validate(body)
    except ValidationError as exc:
        fail(c.in_options(describe_detail(exc.errors(include_url=False))))
    t = dump(c.create_training(request))
    out.print(f"submitted {t['id']} ({t['name']}) to {c.base}")
    if not follow:
        return 0
    return follow_training(c, t["id"])
