"""What earlier attempts of a training left in its folders, read for the next one: the newest complete
``step-N`` checkpoint folder, and rank 0's reports its launcher had not merged yet. Both are in the member's
tree, so both are read through :mod:`gpufleet.memberfs` (no link followed, regular files only).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from gpufleet import memberfs
from gpufleet.memberfs import read_regular

_STEP_DIR = re.compile(r"^step-(\d+)$")


def newest_checkpoint_step(ckpt_dir: Path) -> tuple[int, Path] | None:
    """The newest complete ``step-N`` folder (its ``meta.json`` is written last)."""
    best: tuple[int, Path] | None = None
    try:
        folder = memberfs.Dir.root(ckpt_dir)  # its own name is in the checkpoint root; what it holds is hers
    except OSError:
        return None
    with folder:
        for name in folder.names():
            m = _STEP_DIR.match(name)
            if m and folder.has(f"{name}/meta.json"):
                n = int(m.group(1))
                if best is None or n > best[0]:
                    best = (n, ckpt_dir / name)
    return best


def unmerged_reports(progress_path: Path) -> list[dict[str, Any]]:
    """Rank 0's ``gpufleet.report`` lines of an earlier attempt, as step lines.

    A worker killed mid-run takes its launcher with it before the launcher has
    merged the newest reports into the progress file; the script may still have
    checkpointed after them, so its resume starts past steps found only here.
    """
    from gpufleet.trainings.script_launch import step_fields

    out: list[dict[str, Any]] = []
    raw = read_regular(f"{progress_path}.report.rank0")  # the training's account's file: never through a link
    if raw is None:
        return out
    for chunk in raw.split(b"\n"):
        try:
            line = json.loads(chunk)
        except ValueError:
            continue
        if isinstance(line, dict) and isinstance(line.get("step"), int):
            out.append({**step_fields(line), "type": "step"})
    return out

