"""`gpufleet trainings resume | files | download`: continue a training, and get its files out."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from gpufleet.commands.tables import fmt_size
from gpufleet.commands.trainings import (
    ServerOpt,
    TrainingArg,
    dump,
    fail,
    connect,
    follow_training,
    out,
    trainings_app,
)


def register(app: typer.Typer) -> None:
    """Nothing to add: these commands joined ``gpufleet trainings`` (trainings_app) when this module loaded."""


def _parse_sets(items: list[str]) -> dict[str, object]:
    from gpufleet.engine.config import TrainingConfigError, parse_overrides

    try:
        return parse_overrides(items)
    except TrainingConfigError as exc:
        fail(str(exc))
    return {}


@trainings_app.command("resume")
def resume(
    training_id: TrainingArg,
    set_: Annotated[list[str] | None, typer.Option("--set", help="FIELD=VALUE of a recipe's config to change "
                                                               "first (e.g. max_steps=2000), repeatable")] = None,
    follow: Annotated[bool, typer.Option("--follow/--no-follow", help="follow the log until it ends")] = False,
    server: ServerOpt = None,
) -> None:
    """Continue a cancelled, failed, reclaimed or finished training from its newest checkpoint (same training)."""
    c = connect(server)
    t = dump(c.resume(c.training_id(training_id), _parse_sets(set_) if set_ else None))
    out.print(f"{t['id']}: {t['status']} — {t['status_reason']}", highlight=False, soft_wrap=True)
    if follow:
        raise typer.Exit(follow_training(c, t["id"], offset=dump(c.log_chunk(t["id"], tail=0))["next_offset"]))


@trainings_app.command("files")
def files(training_id: TrainingArg, server: ServerOpt = None) -> None:
    """List a training's checkpoints and outputs (its owner and admins)."""
    c = connect(server)
    page = dump(c.files(c.training_id(training_id)))
    for f in page["data"]:
        print(f"{fmt_size(f['size']):>10}  {f['modified'][:19]}  {f['path']}")
    if not page["data"]:
        print("no files yet", file=sys.stderr)


@trainings_app.command("download")
def download(
    training_id: TrainingArg,
    path: Annotated[str | None, typer.Argument(help="a path `trainings files` lists; default: the newest "
                                                    "checkpoint's files")] = None,
    output: Annotated[Path, typer.Option("--output", "-o", help="a file (one path) or a folder")] = Path("."),
    server: ServerOpt = None,
) -> None:
    """Download one file, or every file of the newest checkpoint."""
    from gpufleet.client import GpufleetError

    c = connect(server)
    training_id = c.training_id(training_id)
    wanted = [path] if path else _newest_checkpoint(dump(c.files(training_id))["data"])
    if not wanted:
        fail(f"training {training_id} has no checkpoint yet (`gpufleet trainings files {training_id}` lists "
             "its files)")
    for p in wanted:
        dest = output / p if output.is_dir() else output
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            got = c.download(training_id, p, dest)
        except GpufleetError as exc:
            fail(str(exc))
        out.print(f"{p} -> {got}", highlight=False)


def _newest_checkpoint(listed: list[dict]) -> list[str]:
    """The newest entry directly under checkpoints/ (a file, or a step-N/ folder's files); with none there,
    the newest in the checkpoint store (store/…)."""
    folder = "checkpoints" if any(f["path"].startswith("checkpoints/") for f in listed) else "store"
    tops: dict[str, tuple[str, list[str]]] = {}
    for f in listed:
        parts = f["path"].split("/")
        if parts[0] != folder or len(parts) < 2:
            continue
        newest, paths = tops.get(parts[1], ("", []))
        tops[parts[1]] = (max(newest, f["modified"]), [*paths, f["path"]])
    if not tops:
        return []
    return max(tops.values())[1]
