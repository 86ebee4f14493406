"""Cap PyTorch's caching allocator at a share of each visible GPU, in the work's own process.

A training, a script's rank or a session's kernel given a share of a GPU (``GPUFLEET_SHARE_MB``)
calls :func:`cap` before the member's first line: the launcher's ranks after choosing their
device, a warm launcher's forked rank before running the script, and a cold script rank (or a
kernel) through ``share/sitecustomize.py``, which the launcher puts first on ``PYTHONPATH`` only
for a share. An allocation past the cap is then ``torch.OutOfMemoryError`` in that process alone.

The cap is the share less ``CONTEXT_MB``: NVML counts the CUDA context against the process, and
PyTorch's fraction does not. Memory outside PyTorch's allocator (another library's own ``cudaMalloc``,
NCCL's buffers) is not covered; the watchdog is (docs/sharing.md). Standard library only, and
torch is imported only here, only for a share.
"""

from __future__ import annotations

import sys
from typing import Any

SHARE_ENV = "GPUFLEET_SHARE_MB"
CONTEXT_MB = 512
MIB = 1024 * 1024


def allocator_mb(share_mb: int) -> int:
    """What PyTorch may hold of a share: the share less the context, never under half the share."""
    return max(share_mb - CONTEXT_MB, share_mb // 2)


def cap(share_mb: int, torch: Any = None, say: Any = None) -> list[dict[str, Any]]:
    """Set the per-process memory fraction of every visible GPU to the share; what was set, per device.

    Nothing where PyTorch is not installed or sees no GPU (a simulated fleet's ranks run on the CPU);
    ``say`` (stderr by default) is told what was done, once.
    """
    if torch is None:
        try:
            import torch  # only a share pays for it
        except ImportError:
            return []
    cuda = torch.cuda
    if not cuda.is_available():
        return []
    done = []
    for i in range(cuda.device_count()):
        total = int(cuda.get_device_properties(i).total_memory)
        fraction = min(1.0, allocator_mb(share_mb) * MIB / total)
        cuda.set_per_process_memory_fraction(fraction, i)
        done.append({"device": i, "fraction": round(fraction, 6), "total_mb": total // MIB})
    if done:
        print(f"[gpufleet] PyTorch's allocator is capped at {allocator_mb(share_mb)} MB of each GPU "
              f"(a share of {share_mb} MB)", file=say or sys.stderr, flush=True)
    return done


def share_of(environ: Any) -> int | None:
    """The share this process was given (``GPUFLEET_SHARE_MB``), None for a whole GPU."""
    text = str(environ.get(SHARE_ENV) or "").strip()
    return int(text) if text.isdigit() and int(text) > 0 else None
