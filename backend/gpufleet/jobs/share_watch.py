"""The watchdog of work on a share of a GPU: over its budget for too long, it is stopped alone.

Every ``share_sample_s`` the attempt's watch reads NVML's per-process memory for the launcher's
process group (the launcher and everything under it: ``telemetry.procmem``) on each of its GPUs.
A group that holds more than its budget on a GPU for longer than ``share_over_s`` is asked to stop
by the stop contract (the stop file and SIGTERM: checkpoint, then exit; ``jobs/stops.py``), then
killed after the grace; it goes back to the queue with its measured peak (the largest seen until its
processes were gone, and at least twice the share it overran) as its new estimate, and holds its GPU
whole when that is more than half of it (no room for a share beside it).
Nothing here touches another group: neighbours keep running.

It acts after up to one sampling period plus ``share_over_s``; memory a process takes and returns
between two samples is not seen (docs/sharing.md).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpufleet.devices import limits
from gpufleet.jobs.peak_memory import OVERRUN_TOLERANCE
from gpufleet.lifecycle import outcome
from gpufleet.telemetry.procmem import process_tree, used_by

MIB = 1024 * 1024
# The requeued estimate leaves this margin above the peak measured (the estimate's own margin).
REQUEUE_MARGIN = 0.10


@dataclass(frozen=True)
class Overrun:
    gpu: int  # the GPU (fleet index) it held too much of
    held: int  # bytes held there at the last sample
    peak: int  # the largest figure seen on any of its GPUs (bytes)
    budget: int  # the share's budget (bytes)
    over_s: float  # how long it had been over
    gpu_total: int | None  # the GPU's memory (bytes), when NVML said

    @property
    def new_estimate(self) -> int:
        """Its measured peak (+ the margin), and at least twice the share it overran: a process stopped while it
        still grew (loading, its first steps) has not shown all it needs, and each stop costs an attempt."""
        return max(math.ceil(self.peak * (1 + REQUEUE_MARGIN)), 2 * self.budget)

    @property
    def exclusive_next(self) -> bool:
        """Whether the next attempt holds its GPU whole: its peak leaves no room for a share beside it."""
        return self.gpu_total is not None and self.new_estimate * 2 > self.gpu_total

    def to_json(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "held": self.held, "peak": self.peak, "budget": self.budget,
                "over_s": round(self.over_s, 2), "new_estimate": self.new_estimate,
                "exclusive_next": self.exclusive_next}

    def note(self, grace_s: float) -> str:
        return (f"its processes held {self.held // MIB} MB of GPU {self.gpu}, over its share of "
                f"{self.budget // MIB} MB, for {self.over_s:.1f}s; asking it to checkpoint and stop "
                f"(up to {grace_s:.0f}s), alone: the GPU's other work keeps running")


def held_to(t: Any) -> int | None:
    """The reservation a share's watchdog holds training ``t`` to, None where none is enforced.

    Work that holds its GPUs whole has no share. A share's budget is enforced where someone measured or
    asked for it: the memory its owner gave (``memory_mb``, ``--memory``), or the peak a watchdog requeued
    it with. An estimate no run of the shape has measured yet is not enforced (the first run measures it,
    and the worker says when it runs over: ``jobs/peak_memory.py``).
    """
    if t.exclusive or not t.memory_estimate:
        return None
    if len(getattr(t, "gpu_ids", None) or []) > 1 or (getattr(t, "world_size", None) or 1) > 1:
        return None  # a share is a budget of one GPU's memory: work across GPUs holds them as before
    est = t.estimate if isinstance(t.estimate, dict) else {}
    asked = t.memory_declared is not None or est.get("source") == "declared" or est.get("total") != t.memory_estimate
    return int(t.memory_estimate) if asked else None


def share_mb(t: Any) -> int | None:
    """The share (MB) the ranks of ``t`` cap PyTorch's allocator at (``rankpath/gpufleet_share.py``), or None."""
    held = held_to(t)
    return held // MIB if held is not None else None


def budget(reserved: int) -> int:
    """What a share's processes may hold: its reservation, and the estimate's own 2 % bound over it."""
    return math.floor(reserved * (1 + OVERRUN_TOLERANCE))


class ShareWatch:
    """Samples one attempt's processes against its budget; :meth:`check` says when to stop them."""

    def __init__(self, nvml: Any, gpu_indexes: Sequence[int], root_pid: int, budget: int, over_s: float,
                 sample_s: float, clock: Any = time.monotonic) -> None:
        self.nvml, self.gpus, self.root, self.budget = nvml, list(gpu_indexes), root_pid, int(budget)
        self.over_s, self.sample_s, self.clock = over_s, sample_s, clock
        self.peak = 0
        self.since: float | None = None  # when (monotonic) it was first seen over, while it stays over
        self._sampled_at = -math.inf
        self.fired: Overrun | None = None

    def check(self) -> Overrun | None:
        """The overrun to act on, once (None before, between samples, and after)."""
        now = self.clock()
        if self.fired is not None or now - self._sampled_at < self.sample_s:
            return None
        self._sampled_at = now
        held = used_by(self.nvml, self.gpus, process_tree(self.root))
        if not held:
            return None
        self.peak = max(self.peak, *held)
        worst = max(range(len(held)), key=lambda i: held[i])
        if held[worst] <= self.budget:
            self.since = None
            return None
        self.since = now if self.since is None else self.since
        if now - self.since < self.over_s:
            return None
        self.fired = Overrun(self.gpus[worst], held[worst], self.peak, self.budget, now - self.since,
                             self._total(self.gpus[worst]))
        return self.fired

    def _total(self, gpu: int) -> int | None:
        try:
            self.nvml.nvmlInit()
        except Exception:  # noqa: BLE001 - no driver: the size is unknown
            return None
        try:
            return int(self.nvml.nvmlDeviceGetMemoryInfo(self.nvml.nvmlDeviceGetHandleByIndex(gpu)).total)
        except Exception:  # noqa: BLE001
            return None
        finally:
            try:
                self.nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001
                pass


def limit_plan(nvml: Any, gpu: int, cgroup: str | None = None) -> limits.LimitPlan:
    """The limit methods that hold a share of GPU ``gpu`` (an NVIDIA GPU NVML sees; else the allocator alone)."""
    try:
        nvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no NVIDIA driver: only the allocator's cap
        return limits.choose("hip")
    try:
        return limits.choose("cuda", nvml, nvml.nvmlDeviceGetHandleByIndex(gpu), cgroup=cgroup)
    except nvml.NVMLError:
        return limits.choose("hip")
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def decision(over: Overrun, saved: str, resume: str) -> outcome.Decision:
    """The end of an attempt the watchdog stopped: back to the queue, with the peak it measured as its estimate."""
    where = ("holding its GPU whole: that peak leaves no room for a share beside it" if over.exclusive_next
             else "as a share again")
    row: dict[str, Any] = {"memory_estimate": over.new_estimate, "exclusive": over.exclusive_next}
    held = f"it held {over.held // MIB} MB of GPU {over.gpu}, over its share of {over.budget // MIB} MB"
    estimate = (f"its measured peak {over.peak // MIB} MB ({over.new_estimate // MIB} MB with the margin, and at "
                "least twice the share)")
    return outcome.Decision(
        "queued", f"stopped by the share watchdog: {held}, for {over.over_s:.1f}s; {saved}; requeued with {estimate} "
                  f"as its estimate, {where}; {resume} (not counted as a restart)", retry_kind="share_overrun", row=row)
