"""What a GPU set that mixes vendors, or a GPU on a backend gpufleet cannot train on, means for a training.

NCCL (NVIDIA), RCCL (AMD) and oneCCL (Intel) only talk within their own
vendor. One job across vendors would have to all-reduce every step through
gloo, over host memory and TCP, instead of the GPUs' own links: several times
slower per step for any model whose gradients are not tiny. gpufleet
therefore runs one job on GPUs of one vendor. The mode such a set calls for,
independent training per vendor group with the replicas averaged every H
steps (local SGD, ``training/localsgd.py``), exists as tested building blocks
that the launcher does not start yet, so a mixed set is refused with the
reason rather than offered.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.devices.types import BACKENDS, VENDOR_OF_BACKEND

SUPPORTED_VENDORS = tuple(VENDOR_OF_BACKEND.values())

MIXED_COST = ("NCCL, RCCL and oneCCL do not talk to each other, so one job would all-reduce through gloo "
              "over host memory every step, several times slower than within one vendor")


def mixed_vendor_message(vendors: Sequence[str]) -> str | None:
    """Why a set of these vendors cannot be one job, its cost and the mode to use; None for one vendor."""
    names = sorted(set(vendors))
    if len(names) < 2:
        return None
    return (f"GPUs of {' and '.join(names)} in one job: {MIXED_COST}; "
            "pick GPUs of one vendor for one job")


def unsupported_backend_reason(backend: str | None, vendor: str | None) -> str | None:
    """Why a GPU cannot hold a rank (its backend or vendor is not one gpufleet trains on); None when it can."""
    if backend and backend not in BACKENDS:
        return f"backend {backend!r} is not one gpufleet trains on (supported: {', '.join(BACKENDS)})"
    if vendor and vendor not in SUPPORTED_VENDORS:
        return f"vendor {vendor!r} is not one gpufleet trains on (supported: {', '.join(SUPPORTED_VENDORS)})"
    if backend and vendor and VENDOR_OF_BACKEND.get(backend) != vendor:
        return f"backend {backend!r} does not belong to vendor {vendor!r} (expected {VENDOR_OF_BACKEND[backend]})"
    return None
