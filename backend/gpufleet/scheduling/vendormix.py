"""What a GPU set that mixes vendors, or a GPU on a backend gpufleet cannot train on, means for a training.

NCCL (NVIDIA), RCCL (AMD) and oneCCL (Intel) only talk within their own
vendor. A recipe training across vendors runs its ranks in one gloo process
group (through host memory) in one of three ``parallel_mode``s
(``engine/modes.py``, run by ``engine/parallel.py``): one job with equal
micro-batches, one job with speed-proportional micro-batches, or independent
training per vendor group with the replicas averaged every ``merge_every``
steps. Validation and recommendation say that a set mixes vendors, what that
costs, and which mode gpufleet would use. A script training (a user's own
loop) picks its process group backend from its device, so it stays on GPUs of
one vendor; a GPU on a backend gpufleet does not know cannot hold a rank.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.devices.types import BACKENDS, VENDOR_OF_BACKEND
from gpufleet.engine.modes import MODE_COST, MODE_WORDS, recommended_mode

SUPPORTED_VENDORS = tuple(VENDOR_OF_BACKEND.values())

MIXED_COST = ("NCCL, RCCL and oneCCL do not talk to each other, so the ranks share one gloo process group "
              "through host memory")


def mixed_vendor_message(vendors: Sequence[str], models: Sequence[str | None] = ()) -> str | None:
    """That a set of these vendors mixes them, its cost, and the mode gpufleet would use; None for one vendor."""
    names = sorted(set(vendors))
    if len(names) < 2:
        return None
    mode = recommended_mode(vendors, models)
    return (f"GPUs of {' and '.join(names)} in one training: {MIXED_COST}. gpufleet would use parallel_mode "
            f"{mode} ({MODE_WORDS[mode]}): {MODE_COST[mode]}; parallel_mode equal would all-reduce every step "
            "through gloo with the slowest GPU setting the pace")


def script_mixed_reason(vendors: Sequence[str]) -> str | None:
    """Why a script training cannot run on these vendors' GPUs; None for one vendor."""
    names = sorted(set(vendors))
    if len(names) < 2:
        return None
    return (f"GPUs of {' and '.join(names)}: a script's ranks join one process group of their device's own "
            "backend, which no vendor shares; pick GPUs of one vendor, or run a recipe training, whose "
            "parallel_mode runs across vendors")


def unsupported_backend_reason(backend: str | None, vendor: str | None) -> str | None:
    """Why a GPU cannot hold a rank (its backend or vendor is not one gpufleet trains on); None when it can."""
    if backend and backend not in BACKENDS:
        return f"backend {backend!r} is not one gpufleet trains on (supported: {', '.join(BACKENDS)})"
    if vendor and vendor not in SUPPORTED_VENDORS:
        return f"vendor {vendor!r} is not one gpufleet trains on (supported: {', '.join(SUPPORTED_VENDORS)})"
    if backend and vendor and VENDOR_OF_BACKEND.get(backend) != vendor:
        return f"backend {backend!r} does not belong to vendor {vendor!r} (expected {VENDOR_OF_BACKEND[backend]})"
    return None
