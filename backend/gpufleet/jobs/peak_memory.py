"""A training's measured peak memory per rank, as the metrics sink stores it.

The measured figure is NVML's used memory for each rank's process, sampled
here on the host while the training runs (``telemetry.procmem``): context +
allocator reserve + anything else, the same for recipes and scripts, and the
quantity the estimate's total stands for. The ranks' own ``peak_memory``
lines (the allocator's peak for a recipe, process figures for a script) are
kept as a breakdown, and are the measured figure only where NVML cannot see
the ranks (ranks on the CPU, GPUs of other vendors).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from gpufleet.telemetry.procmem import PeakWatch

SAMPLE_EVERY_S = 0.5


class PeakMemory:
    def __init__(self) -> None:
        self.watch: PeakWatch | None = None
        self.reported: list[int] | None = None  # the ranks' own lines
        self.kind: str | None = None
        self._sampled_at = 0.0

    def watch_processes(self, nvml: Any, gpu_indexes: Sequence[int], launcher_pid: int) -> None:
        self.watch = PeakWatch(nvml, gpu_indexes, launcher_pid)

    def sample(self) -> dict[str, Any]:
        """Row fields after a new NVML sample (at most every SAMPLE_EVERY_S), else {}."""
        now = time.monotonic()
        if self.watch is None or now - self._sampled_at < SAMPLE_EVERY_S:
            return {}
        self._sampled_at = now
        before = list(self.watch.peaks)
        peaks = self.watch.sample()
        if not peaks or not any(peaks) or peaks == before:
            return {}
        return {"peak_memory_per_rank": list(peaks), "measured_peak_memory": max(peaks)}

    def ranks_reported(self, per_rank: list[int], kind: str | None) -> dict[str, Any]:
        """A ``peak_memory`` line: the breakdown; the measured figure too while NVML has none."""
        self.reported, self.kind = per_rank, kind
        if self.watch is not None and self.watch.measured:
            return {}
        return {"peak_memory_per_rank": per_rank, "measured_peak_memory": max(per_rank)}

    def summary(self) -> dict[str, Any] | None:
        """The closing event's data: what NVML measured beside what the ranks reported."""
        nvml = list(self.watch.peaks) if self.watch is not None and self.watch.measured else None
        if nvml is None and self.reported is None:
            return None
        return {"nvml_per_rank": nvml, "reported_per_rank": self.reported, "reported_kind": self.kind}
