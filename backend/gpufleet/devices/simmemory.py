"""What a simulated GPU shows for a training's rank: context plus reserved memory.

On a real GPU, NVML's used memory for a rank's process is the CUDA context
(fixed per GPU model, driver and torch) plus what the caching allocator has
reserved (never given back while the process lives) plus anything else. A
simulated rank runs on the CPU and holds in host memory what a GPU rank would
hold on the device, so the simulator models its process as

    context (GPUFLEET_SIM_CONTEXT_MB) + the rank process's peak resident memory

read live from /proc. The rank of GPU position ``r`` is the ``r``-th rank
process under the registered launcher (by pid: spawn order), or the launcher
itself when it runs the only rank in-process. The figure never shrinks while the process lives, as a caching
allocator's reserve does not, so any sample during the run reads its peak so far.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

# Helper processes of multiprocessing that are not ranks.
_NOT_RANKS = ("resource_tracker", "semaphore_tracker", "forkserver")


def _peak_rss(pid: int) -> int:
    try:
        for row in Path(f"/proc/{pid}/status").read_text().splitlines():
            if row.startswith("VmHWM:"):
                return int(row.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            kids += [int(x) for x in (task / "children").read_text().split()]
    except (OSError, ValueError):
        return []
    out = []
    for kid in sorted(set(kids)):
        try:
            cmd = Path(f"/proc/{kid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if not any(word in cmd for word in _NOT_RANKS):
            out.append(kid)
    return out


def rank_processes(launcher: int) -> list[int]:
    """The rank processes under ``launcher`` in spawn order.

    A process with a single child is a wrapper (a sandbox, a launcher of one
    rank): its child stands in for it. A process with none runs the rank itself.
    """
    pid = launcher
    while len(kids := _children(pid)) == 1:
        pid = kids[0]
    return kids or [pid]


def reserved(launcher: int, rank: int) -> int:
    ranks = rank_processes(launcher)
    return _peak_rss(ranks[rank] if rank < len(ranks) else ranks[-1])


def modeled(p: Any) -> Any:
    """``p`` (a SimProcess) with its used memory as the model says, when it is modeled."""
    if getattr(p, "context", None) is None:
        return p
    return replace(p, used_memory=int(p.context) + reserved(p.pid, int(p.rank)))
