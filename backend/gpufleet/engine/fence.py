"""Which attempt of a training may write its checkpoints (torch-free).

The supervisor writes ``<checkpoint_dir>/fence.json`` with the attempt number
before it starts that attempt's launcher. A launcher of an older attempt (one
whose worker was killed and whose lease ran out) reads the fence before and
after it puts a checkpoint in place, and drops the checkpoint when a newer
attempt has started: so a resume never picks a checkpoint of a fenced attempt.
"""

from __future__ import annotations

import json
from pathlib import Path

from gpufleet.memberfs import write_new

FENCE = "fence.json"


class FencedError(RuntimeError):
    """A newer attempt of this training has started; this one may not write."""


def write_fence(ckpt_dir: str | Path, attempt: int) -> None:
    root = Path(ckpt_dir)
    root.mkdir(parents=True, exist_ok=True)
    write_new(root / FENCE, json.dumps({"attempt": int(attempt)}))  # the folder is the training's account's


def current_attempt(ckpt_dir: str | Path) -> int | None:
    try:
        return int(json.loads((Path(ckpt_dir) / FENCE).read_text())["attempt"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def check(ckpt_dir: str | Path, attempt: int | None) -> None:
    """Raise :class:`FencedError` when a newer attempt than ``attempt`` owns the folder."""
    if attempt is None:
        return
    newest = current_attempt(ckpt_dir)
    if newest is not None and newest > attempt:
        raise FencedError(f"attempt {attempt} is fenced: attempt {newest} of this training has started")
