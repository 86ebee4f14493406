"""What a training's processes hold on their GPUs, as another process sees it.

A rank's measured memory is NVML's used memory for the rank's process: the
CUDA context, everything the caching allocator reserved, and anything else the
process holds. It is read from the host's device backend (real NVML, or the
simulator's, which models the same quantities), for the launcher and every
process under it, so a recipe's spawned ranks and a script's ranks are
measured alike. The allocator's own peaks (``max_memory_allocated``) are a
breakdown beside this figure, never a substitute for it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def process_tree(root: int) -> set[int]:
    """``root`` and every process under it (from /proc's children lists)."""
    seen, todo = {root}, [root]
    while todo:
        pid = todo.pop()
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                kids = [int(x) for x in (task / "children").read_text().split()]
            except (OSError, ValueError):
                continue
            for kid in kids:
                if kid not in seen:
                    seen.add(kid)
                    todo.append(kid)
    return seen


def used_by(nvml: Any, gpu_indexes: Sequence[int], pids: set[int]) -> list[int] | None:
    """Bytes that ``pids`` hold on each of ``gpu_indexes`` now (NVML's per-process figure),
    or None when the driver cannot tell."""
    try:
        nvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver: nothing to measure
        return None
    try:
        out = []
        for idx in gpu_indexes:
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(idx)
                procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            except Exception:  # not an NVIDIA GPU, or lost: NVML cannot see its ranks
                log.debug("per-process memory of GPU %s could not be read", idx, exc_info=True)
                out.append(0)
                continue
            out.append(sum(int(p.usedGpuMemory or 0) for p in procs if p.pid in pids))
        return out
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


class PeakWatch:
    """The largest per-GPU figure seen for one training's process tree.

    GPU ``gpu_indexes[r]`` is rank ``r``'s on this host, so the result is per rank.
    """

    def __init__(self, nvml: Any, gpu_indexes: Sequence[int], root_pid: int) -> None:
        self.nvml, self.gpus, self.root = nvml, list(gpu_indexes), root_pid
        self.peaks = [0] * len(self.gpus)

    def sample(self) -> list[int] | None:
        if not self.gpus:
            return None
        now = used_by(self.nvml, self.gpus, process_tree(self.root))
        if now is None:
            return None
        self.peaks = [max(a, b) for a, b in zip(self.peaks, now)]
        return self.peaks

    @property
    def measured(self) -> bool:
        return any(self.peaks)
