"""Per-backend device operations and ``move_to_device``.

Training code asks ``backend_ops(device)`` for what differs between CPU,
CUDA (and HIP, which PyTorch drives through ``torch.cuda``) and Intel XPU,
instead of calling ``torch.cuda`` directly, so one loop runs on all of them.
This module imports torch; the web app must not import it at module level.
"""

from __future__ import annotations

import contextlib
import resource
import sys

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

def move_to_device(data: Any, device: torch.device | str, non_blocking: bool = False) -> Any:
    """Move tensors (also inside dicts, lists, tuples), numpy arrays and
    objects with ``.to()`` to ``device``; other values come back unchanged."""
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(data, torch.Tensor):
        return data.to(device, non_blocking=non_blocking)
    if isinstance(data, np.ndarray):
        return torch.from_numpy(data).to(device, non_blocking=non_blocking)
    if isinstance(data, dict):
        return type(data)((k, move_to_device(v, device, non_blocking)) for k, v in data.items())
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
        return type(data)(*(move_to_device(v, device, non_blocking) for v in data))
    if isinstance(data, (list, tuple)):
        return type(data)(move_to_device(v, device, non_blocking) for v in data)
    if isinstance(data, (int, float, str, bool, bytes)) or data is None:
        return data
    to = getattr(data, "to", None)
    if callable(to):
        try:
            return to(device, non_blocking=non_blocking)
        except TypeError:  # a .to() without non_blocking
            return to(device)
    return data

@dataclass(frozen=True)
class BackendOps:
    """What one device kind can do. ``kind`` is the torch device type."""

    device: torch.device

    @property
    def kind(self) -> str:
        return self.device.type

    @property
    def _mod(self) -> Any:
        return getattr(torch, self.kind) if self.kind in ("cuda", "xpu") else None

    @property
    def dist_backend(self) -> str:
        """The process-group backend that fits this device."""
        return {"cuda": "nccl", "xpu": "xccl"}.get(self.kind, "gloo")

    @property
    def is_accelerator(self) -> bool:
        return self.kind in ("cuda", "xpu")

    def set_device(self) -> None:
        if self._mod is not None:
            self._mod.set_device(self.device)

    def synchronize(self) -> None:
        if self._mod is not None:
            self._mod.synchronize(self.device)

    def stream(self) -> contextlib.AbstractContextManager:
        """A context that runs work on a side stream (a no-op on CPU)."""
        if self._mod is None:
            return contextlib.nullcontext()
        return self._mod.stream(self._mod.Stream(self.device))

    def memory_info(self) -> tuple[int, int] | None:
        """(free, total) bytes, or None where the backend cannot tell."""
        if self.kind == "cuda":
            return torch.cuda.mem_get_info(self.device)
        if self.kind == "xpu" and hasattr(torch.xpu, "mem_get_info"):
            return torch.xpu.mem_get_info(self.device)
        return None

    def max_memory_allocated(self) -> int | None:
        """Peak bytes this process allocated on the device; on CPU the peak RSS."""
        if self._mod is not None:
            return int(self._mod.max_memory_allocated(self.device))
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        # Linux reports KiB, macOS bytes.
        return int(rss if sys.platform == "darwin" else rss * 1024)

    def reset_peak_memory_stats(self) -> None:
        if self._mod is not None:
            self._mod.reset_peak_memory_stats(self.device)

    def autocast(self, dtype: torch.dtype | None) -> contextlib.AbstractContextManager:
        """Mixed precision in ``dtype``; None (or float32) means full precision."""
        if dtype is None or dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.kind, dtype=dtype)

    def grad_scaler(self, enabled: bool) -> torch.amp.GradScaler:
        """A loss scaler; only fp16 needs one enabled (bf16 has fp32's range)."""
        return torch.amp.GradScaler(self.kind, enabled=enabled)


def backend_ops(device: torch.device | str) -> BackendOps:
    """The operations for ``device`` (``"cpu"``, ``"cuda:1"``, ``"xpu:0"``;
    ``"hip:N"`` maps to torch's cuda device, as ROCm builds of torch do)."""
    if isinstance(device, str):
        kind, _, idx = device.partition(":")
        if kind == "hip":
            device = f"cuda:{idx or 0}"
        device = torch.device(device)
    return BackendOps(device)

