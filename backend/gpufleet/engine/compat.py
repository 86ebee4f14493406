"""The torch range gpufleet supports (pyproject: ``torch>=2.4``), in one place.

Newer torch APIs are used only where the installed torch has them; each check
reads the real signature once (``inspect.signature``), never a version string,
so a backport or a nightly is judged by what it offers. Everything that builds
keyword arguments for a torch wrapper builds them here, where
``tests/training/test_compat.py`` checks them against the installed torch.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import lru_cache
from typing import Any

OLDEST_TORCH = "2.4"


@lru_cache(maxsize=None)
def accepts(fn: Callable, name: str) -> bool:
    """Whether ``fn`` (a function or a class's ``__init__``) takes keyword ``name``."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def ddp_class() -> type:
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel


def ddp_kwargs(sync_buffers: bool, device_ids: list[int] | None, bucket_mb: float | None,
               ddp: type | None = None) -> dict[str, Any]:
    """DistributedDataParallel's keywords for this torch.

    ``sync_buffers`` False saves a broadcast of the buffers per forward: torch
    2.13 calls it ``forward_sync_buffers``, older releases ``broadcast_buffers``
    (which, when False, also leaves the buffers out of the first sync).
    """
    ddp = ddp or ddp_class()
    kw: dict[str, Any] = {
        "device_ids": device_ids,
        # Gradients live in the all-reduce buckets: no copy, less memory.
        "gradient_as_bucket_view": True,
    }
    if bucket_mb is not None:
        kw["bucket_cap_mb"] = bucket_mb
    if accepts(ddp.__init__, "forward_sync_buffers"):
        kw["forward_sync_buffers"] = sync_buffers
    elif not sync_buffers:
        kw["broadcast_buffers"] = False
    return kw


def out_of_memory_error() -> type[BaseException]:
    """The exception torch raises when a device runs out of memory: the device-neutral
    ``torch.OutOfMemoryError`` where this torch has it, else ``torch.cuda.OutOfMemoryError``
    (the same class, under its older and only name)."""
    import torch

    return getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError


def fully_shard_fn() -> Callable:
    """FSDP2's ``fully_shard``: public since torch 2.6, ``_composable`` before."""
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # torch < 2.6
        from torch.distributed._composable.fsdp import fully_shard
    return fully_shard


def fully_shard_kwargs(reshard_after_forward: bool) -> dict[str, Any]:
    return {"reshard_after_forward": reshard_after_forward}
