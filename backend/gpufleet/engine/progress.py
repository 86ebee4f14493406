"""Progress as JSON lines, the one channel from a training to its parent.

Each line is one object with a ``type`` (``start``, ``step``, ``checkpoint``,
``peak_memory``, ``eval``, ``error``, ``end``) and a ``time``. Rank 0 and the
launcher both append to the file; each line goes out in a single ``write`` on
a file opened with O_APPEND, so lines never interleave. Torch-free.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any


def _clean(v: Any) -> Any:
    # JSON has no NaN/inf: a diverged loss is reported as null, not as invalid JSON.
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


def step_line(step: int, max_steps: int, loss: float | None, parts: dict[str, float | None],
              samples_per_s: float | None) -> str:
    """The training log's progress line: ``step 40/200  loss 0.1235  mse 0.1201  1,234 samples/s``."""
    words = [f"step {step}/{max_steps}", "loss " + ("nan" if loss is None else f"{loss:.4g}")]
    words += [f"{k} {'nan' if v is None else format(v, '.4g')}" for k, v in parts.items()]
    if samples_per_s:
        words.append(f"{samples_per_s:,.0f} samples/s")
    return "  ".join(words)


class ProgressWriter:
    def __init__(self, path: str | Path | None, echo: Any = None):
        self.path = Path(path) if path else None
        self._fd: int | None = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        # Optional callable(dict) for in-process callers (a notebook, tests).
        self.echo = echo

    def write(self, type_: str, **fields: Any) -> dict[str, Any]:
        record = _clean({"type": type_, "time": time.time(), **fields})
        if self._fd is not None:
            os.write(self._fd, (json.dumps(record) + "\n").encode())
        if self.echo is not None:
            self.echo(record)
        return record

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def read_progress(path: str | Path) -> list[dict[str, Any]]:
    """Every complete line of a progress file (a partly written last line is skipped)."""
    p = Path(path)
    if not p.exists():
        return []
    out = []
    for line in p.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def follow_progress(path: str | Path, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """New complete lines after byte ``offset``, and the offset to continue from."""
    p = Path(path)
    if not p.exists():
        return [], offset
    with p.open("rb") as fh:
        fh.seek(offset)
        data = fh.read()
    end = data.rfind(b"\n")
    if end < 0:
        return [], offset
    records = []
    for line in data[: end + 1].splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records, offset + end + 1
