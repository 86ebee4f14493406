"""``report(step=..., loss=..., **scalars)``: metrics from a user's own training, in any interpreter.

Use it as ``gpufleet.report`` where gpufleet is installed, or as
``from gpufleet_report import report`` anywhere: the script launcher puts this
file's folder on every rank's ``PYTHONPATH``. It needs only the standard
library. The format it writes is documented in docs/your-code.md, for
programs in other languages.

Inside a gpufleet script training, rank 0's calls become points of the
training's loss curve (the metrics endpoint, the dashboard, the
``training:<id>`` stream); every rank's calls give its time per step, so
stragglers show. Each rank appends to its own file
(``$GPUFLEET_REPORT_FILE.rank<N>``); the launcher merges them. Outside
gpufleet it does nothing, so a script can call it unconditionally. It imports nothing heavy;
tensors are turned into numbers with ``float()``.
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Any

_state: dict[str, Any] = {"fd": None, "path": None, "last": None}


def _target() -> int | None:
    base = os.environ.get("GPUFLEET_REPORT_FILE")
    if not base:
        return None
    path = f"{base}.rank{os.environ.get('RANK', '0')}"
    if _state["path"] != path:
        _state["fd"] = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        _state["path"] = path
    return _state["fd"]


def _number(name: str, value: Any) -> float | None:
    try:
        v = float(value.item() if hasattr(value, "item") else value)
    except (TypeError, ValueError):
        raise TypeError(f"gpufleet.report: {name} must be a number or a one-element tensor, got {value!r}") from None
    return v if math.isfinite(v) else None


def report(step: int, loss: Any = None, **scalars: Any) -> None:
    """Record one step. ``loss`` and every scalar are numbers (or one-element tensors)."""
    fd = _target()
    if fd is None:
        return
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise TypeError(f"gpufleet.report: step must be a non-negative int, got {step!r}")
    now = time.monotonic()
    last = _state["last"]
    parts = {k: _number(k, v) for k, v in scalars.items()}
    record: dict[str, Any] = {"type": "step", "time": time.time(), "step": step,
                              "loss": None if loss is None else _number("loss", loss),
                              "parts": {k: v for k, v in parts.items() if v is not None}}
    if last is not None and step > last[0]:
        record["step_time"] = (now - last[1]) / (step - last[0])
    _state["last"] = (step, now)
    os.write(fd, (json.dumps(record) + "\n").encode())
