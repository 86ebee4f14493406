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

import math
import time
from collections.abc import Sequence
from typing import Any

from gpufleet.telemetry.procmem import PeakWatch

SAMPLE_EVERY_S = 0.5
# A reservation is trimmed to the measured peak plus this margin, once the ranks are in their
# steady state: at least TRIM_AFTER_STEPS steps reported and TRIM_AFTER_SAMPLES NVML samples taken.
TRIM_MARGIN = 0.10
TRIM_AFTER_STEPS = 3
TRIM_AFTER_SAMPLES = 3
# Only a trim that frees at least this share of the reservation is made (no churn for a few MiB).
TRIM_WORTH = 0.10
# A rank over its reservation by more than this share is said: the estimate's own bound is 2 % under
# (a calibrated estimate is the measured figure of earlier runs, and runs differ by that much).
OVERRUN_TOLERANCE = 0.02


class PeakMemory:
    """The ranks' measured peaks, and the reservation they are held to.

    ``reserved`` is what the scheduler reserved on each of the ranks' GPUs (the
    estimate, or the memory declared). A rank NVML sees above it (by more than
    the estimate's 2 % bound) is said once
    (``overrun``): work packed beside the reservation may run out of memory, and
    the next estimate of the shape counts what this run measured. Once the
    ranks of a training that shares its GPUs are in their steady state, an
    estimated reservation well above the measured peak is trimmed to that peak
    plus a margin (``trim``), so the rest of the GPU can take other work.
    """

    def __init__(self, reserved: int | None = None, trimmable: bool = False) -> None:
        self.watch: PeakWatch | None = None
        self.reported: list[int] | None = None  # the ranks' own lines
        self.kind: str | None = None
        self._sampled_at = 0.0
        self.reserved = reserved
        # Only an estimated reservation of a training that shares its GPUs (batches, sweep trials) is
        # trimmed: an exclusive one holds its GPUs whole, so a smaller reservation would free nothing,
        # and memory a person declared is theirs to know (an evaluation later may need it).
        self.trimmable = trimmable
        self.samples = 0  # NVML samples that saw the ranks
        self._overrun: dict[str, int] | None = None
        self._overrun_said = False
        self._trimmed = False

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
        if not peaks or not any(peaks):
            return {}
        self.samples += 1
        if self.reserved and not self._overrun_said and max(peaks) > self.reserved * (1 + OVERRUN_TOLERANCE):
            rank = max(range(len(peaks)), key=lambda i: peaks[i])
            self._overrun = {"rank": rank, "measured": int(peaks[rank]), "reserved": int(self.reserved)}
            self._overrun_said = True
        if peaks == before:
            return {}
        return {"peak_memory_per_rank": list(peaks), "measured_peak_memory": max(peaks)}

    def overrun(self) -> dict[str, int] | None:
        """The first NVML sample above the reservation, once per attempt; else None."""
        said, self._overrun = self._overrun, None
        return said

    def trim(self, step: int | None) -> dict[str, int] | None:
        """``{"from", "to", "measured", "step"}`` once, when the steady state's peak leaves the reservation
        well above what the ranks hold; else None. Later samples are held to the trimmed figure."""
        if (self._trimmed or not self.trimmable or not self.reserved or self.watch is None or not self.watch.measured
                or step is None or step < TRIM_AFTER_STEPS or self.samples < TRIM_AFTER_SAMPLES):
            return None
        measured = max(self.watch.peaks)
        to = math.ceil(measured * (1 + TRIM_MARGIN))
        if to > self.reserved * (1 - TRIM_WORTH):
            return None
        self._trimmed = True
        said = {"from": int(self.reserved), "to": int(to), "measured": int(measured), "step": int(step)}
        self.reserved = to
        return said

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
