"""Reading the launcher's progress file and spotting stragglers.

The launcher appends one JSON object per line (``start``, ``step``,
``checkpoint``, ``peak_memory``, ``error``, ``end``). The reader keeps its
byte offset and holds back a partial last line until it is complete.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet.memberfs import read_regular


class ProgressReader:
    def __init__(self, path: Path):
        self.path = path
        self.offset = 0
        self._partial = b""

    def read(self) -> list[dict[str, Any]]:
        # The file is the training's account's: a link, a FIFO or a device there reads as nothing.
        data = read_regular(self.path, self.offset)
        if not data:
            return []
        self.offset += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()  # b"" when the data ended with a newline
        out = []
        for line in lines:
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn line from a killed launcher; the next attempt rewrites it
            if isinstance(obj, dict) and "type" in obj:
                out.append(obj)
        return out


@dataclass
class StragglerWatch:
    """Warn once per rank whose step time stays well above the others.

    "Stays": ``patience`` consecutive steps at more than ``ratio`` times the
    median of the other ranks. A single slow step (a checkpoint, a GC pause)
    is not a straggler.
    """

    ratio: float = 2.0
    patience: int = 3
    min_step_s: float = 0.005
    _streak: dict[int, int] = field(default_factory=dict)
    warned: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        if self.ratio <= 1 or self.patience < 1:
            raise ValueError("ratio must be > 1 and patience >= 1")

    def observe(self, times: list[float] | None) -> list[tuple[int, float, float]]:
        """Feed one step's per-rank times; returns ``[(rank, its time, others' median)]`` newly slow."""
        if not times or len(times) < 2:
            return []
        found = []
        for rank, t in enumerate(times):
            others = [x for i, x in enumerate(times) if i != rank]
            med = statistics.median(others)
            slow = t > self.min_step_s and t > self.ratio * max(med, 1e-9)
            self._streak[rank] = self._streak.get(rank, 0) + 1 if slow else 0
            if self._streak[rank] >= self.patience and rank not in self.warned:
                self.warned.add(rank)
                found.append((rank, t, med))
        return found
