"""``gpufleet sweep start FILE | ls | show ID | cancel ID``: many trials of one recipe or script, searched.

A sweep file is YAML: ``name``, a ``recipe`` with its ``config`` or a
``script`` (``dir``, uploaded once for every trial, and ``argv`` with
``{param}`` where a parameter goes), the ``space``, ``method``, ``trials``,
``asha``, ``metric``, ``direction`` and ``parallel`` (docs: Sweeps).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from gpufleet.commands.tables import Column, WideOpt, fmt_loss, print_table
from gpufleet.commands.trainings import ServerOpt, fail, connect, err, out
from gpufleet.devices.device import index_list

sweep_app = typer.Typer(help="Sweeps: many trials of one recipe or script, searched and stopped early.",
                        no_args_is_help=True)
JsonOpt = Annotated[bool, typer.Option("--json", help="print the sweep as JSON")]
SweepArg = Annotated[str, typer.Argument(metavar="SWEEP", help="the sweep's ID, the start of it, or its name")]


def register(app: typer.Typer) -> None:
    app.add_typer(sweep_app, name="sweep")


def _script_code(c: Any, body: dict[str, Any], base: Path, said: list[str]) -> None:
    """Pack and upload the script's ``dir`` (once for every trial) and put its hash in the body."""
    from gpufleet.commands.run import find_requirements, upload
    from gpufleet.trainings.archive import PackTooLarge, pack

    script = body.get("script")
    if not isinstance(script, dict) or "code" in script:
        return
    root = (base / str(script.pop("dir", "."))).resolve()
    if not root.is_dir():
        fail(f"script.dir {root} is not a directory")
    try:
        data = pack(root)
    except PackTooLarge as exc:
        fail(str(exc))
    if "requirements" not in script:
        script["requirements"] = find_requirements(root, None, False)
    script["code"] = upload(c, data, said)  # "already on the server" is said once the sweep is accepted


@sweep_app.command("start")
def start(
    file: Annotated[Path, typer.Argument(help="the sweep file (YAML)")],
    server: ServerOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Start a sweep; its trials are queued as your trainings, `parallel` at a time."""
    from gpufleet.client.errors import InvalidRequest
    from gpufleet.client.sweeps import read_sweep_file

    try:
        body = read_sweep_file(file)
    except InvalidRequest as exc:
        fail(str(exc))
    c, said = connect(server), []
    _script_code(c, body, file.resolve().parent, said)
    try:
        sweep = c.start_sweep(body)
    except InvalidRequest as exc:
        fail(f"{file}: {exc}")
    for note in said:
        err.print(note, highlight=False)
    if as_json:
        print(json.dumps(sweep.model_dump(mode="json"), indent=2))
        return
    out.print(f"sweep {sweep.id} started: {_at_once(sweep.total_trials, sweep.parallel)} "
              f"(`gpufleet sweep show {sweep.id}`)", highlight=False)


def _at_once(total: int, parallel: int) -> str:
    """How many trials run at once, in words: "all at once" when ``parallel`` is not below the trial count."""
    trials = f"{total} trial{'' if total == 1 else 's'}"
    if parallel >= total:
        return trials if total == 1 else f"{trials}, all at once"
    return f"{trials}, {parallel} at a time"


LS_COLUMNS = (Column("ID"), Column("NAME", shorten=True, min_width=10), Column("OWNER", drop=2), Column("STATUS"),
              Column("METHOD", drop=3), Column("TRIALS"), Column("BEST", drop=1))


@sweep_app.command("ls")
def ls(server: ServerOpt = None, owner: Annotated[str | None, typer.Option("--owner")] = None,
       wide: WideOpt = False) -> None:
    """List sweeps, newest first."""
    page = connect(server).sweeps(owner=owner)
    rows = [[str(s.id), s.name, s.owner, s.status, s.method + (" + asha" if s.early_stopping else ""),
             _counts(s.trials_by_state, s.total_trials), "-" if s.best_trial is None else f"trial {s.best_trial}"]
            for s in page.data]
    print_table(out, LS_COLUMNS, rows, wide=wide)


def _counts(by_state: dict[str, int], total: int) -> str:
    ended = sum(by_state.get(k, 0) for k in ("complete", "pruned", "failed", "cancelled"))
    return f"{ended}/{total}"


TRIAL_COLUMNS = (Column("#"), Column("PARAMS", shorten=True, min_width=16), Column("STATE"), Column("METRIC"),
                 Column("RUNG"), Column("STEP", drop=2), Column("GPU", drop=1), Column("TRAINING", drop=3),
                 Column("REASON", shorten=True, min_width=24))


def _rung(t: Any) -> str:
    """The rung as the reason numbers it: the one that stopped it or where it waits; for a running one, the next."""
    if t.rung is None:
        return "-"
    return f"next {t.rung}" if t.state == "running" else str(t.rung)


@sweep_app.command("show")
def show(sweep: SweepArg, server: ServerOpt = None, as_json: JsonOpt = False, wide: WideOpt = False) -> None:
    """A sweep and its trials: parameters, state, metric, GPU; the best trial."""
    c = connect(server)
    s = c.sweep(_resolve(c, sweep))
    if as_json:
        print(json.dumps(s.model_dump(mode="json"), indent=2))
        return
    out.print(f"{s.name}  {s.status}  {s.method}{' + asha' if s.early_stopping else ''}  {s.metric} "
              f"({s.direction})  {_counts(s.trials_by_state, s.total_trials)} trials ended", highlight=False)
    if s.status_reason:
        out.print(s.status_reason, highlight=False)
    rows = [[str(t.number), " ".join(f"{k}={v}" for k, v in t.params.items()), t.state,
             "-" if t.metric is None else fmt_loss(t.metric), _rung(t), f"{t.step or 0}/{t.max_steps or '?'}",
             f"{t.host}:{index_list(t.gpu_ids)}" if t.host and t.gpu_ids else "-",
             str(t.training_id or "-")[:8], t.reason or "-"] for t in s.trials]
    print_table(out, TRIAL_COLUMNS, rows, wide=wide)
    if s.best is not None:
        out.print(f"best: trial {s.best.number} ({' '.join(f'{k}={v}' for k, v in s.best.params.items())}) "
                  f"{s.metric} {fmt_loss(s.best.metric)}", highlight=False)


@sweep_app.command("cancel")
def cancel(sweep: SweepArg, server: ServerOpt = None) -> None:
    """Cancel the sweep and every trial of it."""
    c = connect(server)
    s = c.cancel_sweep(_resolve(c, sweep))
    out.print(f"sweep {s.id} {s.status}", highlight=False)


def _resolve(c: Any, ref: str) -> str:
    """A sweep's full ID from its ID, the start of one (as `ls` shows it) or its name, among the newest 500."""
    import uuid

    try:
        return str(uuid.UUID(ref))
    except ValueError:
        pass
    key = ref.strip().lower()
    rows = c.sweeps(limit=500).data
    found = [str(r.id) for r in rows if str(r.id).startswith(key)] or [str(r.id) for r in rows if r.name == ref]
    if len(found) != 1:
        fail(f"no sweep's ID or name matches {ref!r} (`gpufleet sweep ls` lists them)" if not found else
             f"{ref!r} matches {len(found)} sweeps ({', '.join(f[:8] for f in found[:5])}); give more of the ID")
    return found[0]
