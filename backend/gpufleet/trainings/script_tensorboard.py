"""Scalars a script writes as TensorBoard event files, read as its metrics (optional: ``tensorboard``).

A script that already logs with ``SummaryWriter`` into ``GPUFLEET_OUTPUT_DIR``
gets its curves in gpufleet without a change: the launcher reads the event
files there with the ``tensorboard`` package's own reader (installed with
``pip install 'gpufleet[tensorboard]'``; without it nothing is read) and
writes one ``step`` line per step, once a later step shows the step is
complete. A tag named ``loss`` (or ending in ``/loss``) is the loss; every
other scalar is charted by its tag. When the script calls ``gpufleet.report``
its reports are the curve and the event files are left alone.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from gpufleet.engine.progress import ProgressWriter

POLL_EVERY_S = 2.0


def _loader() -> Any:
    try:
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
        from tensorboard.util import tensor_util
    except ImportError:
        return None
    return EventFileLoader, tensor_util


class TensorBoardWatch:
    def __init__(self, output_dir: str, progress: ProgressWriter):
        self.dir = Path(output_dir) if output_dir else None
        self.progress = progress
        self.lib: Any = None  # the reader, imported once an event file exists (it takes seconds to load)
        self.loaders: dict[Path, Any] = {}
        self.steps: dict[int, dict[str, float]] = {}
        self.last_poll = 0.0

    def poll(self, final: bool = False) -> None:
        now = time.monotonic()
        if self.dir is None or self.lib is False or (not final and now - self.last_poll < POLL_EVERY_S):
            return
        self.last_poll = now
        paths = sorted(self.dir.rglob("*tfevents*"))
        if not paths:
            return
        if self.lib is None:
            self.lib = _loader() or False  # False: not installed, never look again
            if self.lib is False:
                return
        loader_cls, tensor_util = self.lib
        for path in paths:
            loader = self.loaders.setdefault(path, loader_cls(str(path)))
            try:
                for event in loader.Load():
                    for v in event.summary.value:
                        value = _scalar(v, tensor_util)
                        if value is not None:
                            self.steps.setdefault(int(event.step), {})[v.tag] = value
            except Exception:  # noqa: BLE001 - a half-written or foreign file is read again next time
                continue
        done = sorted(self.steps) if final else sorted(self.steps)[:-1]  # the newest step may still grow
        for step in done:
            self._write(step, self.steps.pop(step))

    def _write(self, step: int, values: dict[str, float]) -> None:
        loss_tag = next((t for t in values if t == "loss" or t.endswith("/loss")), None)
        loss = values.pop(loss_tag) if loss_tag else None
        self.progress.write("step", step=step, loss=loss, parts=values, source="tensorboard")


def _scalar(v: Any, tensor_util: Any) -> float | None:
    kind = v.WhichOneof("value")
    try:
        if kind == "simple_value":
            return float(v.simple_value)
        if kind == "tensor" and v.metadata.plugin_data.plugin_name == "scalars":
            return float(tensor_util.make_ndarray(v.tensor).item())
    except (TypeError, ValueError):
        return None
    return None
