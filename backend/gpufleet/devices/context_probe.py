"""Measure the CUDA context on this host: what a process holds before its first tensor.

The context depends on the GPU model, the driver, the CUDA runtime and torch
(lazy module loading halves it), so it is measured, never assumed: a short
probe process initialises CUDA on one GPU, loads cuBLAS with one small matmul,
reports its pid and ``torch.cuda.memory_reserved()``, and waits; NVML's used
memory for that pid minus what the allocator reserved is the context. One
probe per GPU model on the host (a few seconds); the agent records the figure
with each GPU (``gpus.context_bytes``) and the memory estimate uses it.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from gpufleet.devices.types import GPUInfo

log = logging.getLogger(__name__)

PROBE = """
import json, os, sys
import torch
i = int(sys.argv[1])
torch.cuda.set_device(i)
a = torch.ones(64, 64, device="cuda")
(a @ a).sum().item()
print(json.dumps({"pid": os.getpid(), "reserved": torch.cuda.memory_reserved(i)}), flush=True)
sys.stdin.readline()
"""


def probe_one(nvml: Any, index: int, timeout_s: float = 120.0) -> int | None:
    """Context bytes of CUDA GPU ``index`` (NVML numbering), or None when it cannot be measured."""
    env = {**os.environ, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    try:
        proc = subprocess.Popen([sys.executable, "-c", PROBE, str(index)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    except OSError:
        return None
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line:
            return None
        said = json.loads(line)
        nvml.nvmlInit()
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            used = sum(int(p.usedGpuMemory or 0) for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)
                       if p.pid == said["pid"])
        finally:
            nvml.nvmlShutdown()
        return used - int(said["reserved"]) if used > int(said["reserved"]) else None
    except Exception:  # a probe that fails leaves the estimate's default in place
        log.warning("the CUDA context probe on GPU %d failed", index, exc_info=True)
        return None
    finally:
        try:
            proc.communicate("\n", timeout=timeout_s)
        except (subprocess.TimeoutExpired, OSError, ValueError):
            proc.kill()


def probe_contexts(nvml: Any, gpus: Sequence[GPUInfo]) -> dict[int, int]:
    """One probe per GPU model among the healthy CUDA GPUs; each GPU of that model gets its figure."""
    by_model: dict[str | None, int | None] = {}
    out = {}
    for g in gpus:
        if g.backend != "cuda" or not g.healthy:
            continue
        if g.name not in by_model:
            by_model[g.name] = probe_one(nvml, g.device_id)
        if by_model[g.name] is not None:
            out[g.index] = by_model[g.name]
    return out
