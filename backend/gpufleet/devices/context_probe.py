"""Measure the CUDA context on this host: what a process holds before its first tensor.

The context depends on the GPU model, the driver, the CUDA runtime and torch
(lazy module loading halves it), so it is measured, never assumed. A process
that has trained holds more than one that has only initialised CUDA: lazy
loading brings in the forward, backward, AdamW and autocast kernels when they
first run (742 MiB against 676 on an H200 with torch 2.11). So the short probe
process runs what a training runs: a tiny model's forward, backward, gradient
clipping and AdamW step, in fp32 and under autocast in bf16 (where the GPU has
it) and fp16, then reports its pid and ``torch.cuda.memory_reserved()`` and
waits; NVML's used memory for that pid minus what the allocator reserved is
the context. One probe per GPU model on the host (a few seconds); the agent
records the figure with each GPU (``gpus.context_bytes``), so a new driver or
torch is measured again at the agent's next start, and the memory estimate
uses it.
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

# argv: the GPU's NVML index, and the device type ("cpu" runs the same steps without CUDA,
# which is how the probe itself is tested on a machine without a GPU).
PROBE = """
import json, os, sys
import torch
i, kind = int(sys.argv[1]), sys.argv[2]
cuda = kind == "cuda"
if cuda:
    torch.cuda.set_device(i)
dev = torch.device(kind, i) if cuda else torch.device(kind)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.LayerNorm(128),
                            torch.nn.Linear(128, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8)).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x, y = torch.randn(32, 64, device=dev), torch.randint(0, 8, (32,), device=dev)
precisions = [("fp32", None)]
if not cuda or torch.cuda.is_bf16_supported():
    precisions.append(("bf16", torch.bfloat16))
if cuda:
    precisions.append(("fp16", torch.float16))
trained = []
for name, dtype in precisions:
    for _ in range(2):  # AdamW's states are made at the first step; the second is the steady one
        with torch.autocast(dev.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            out = model(x)
            loss = torch.nn.functional.cross_entropy(out, y) + out.float().pow(2).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    trained.append(name)
float(loss)
reserved = torch.cuda.memory_reserved(i) if cuda else 0
print(json.dumps({"pid": os.getpid(), "reserved": reserved, "trained": trained}), flush=True)
sys.stdin.readline()
"""


def probe_one(nvml: Any, index: int, timeout_s: float = 120.0, device: str = "cuda") -> int | None:
    """Context bytes of CUDA GPU ``index`` (NVML numbering), or None when it cannot be measured."""
    env = {**os.environ, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    try:
        proc = subprocess.Popen([sys.executable, "-c", PROBE, str(index), device], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    except OSError:
        return None
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line:
            return None
        said = json.loads(line)
        log.debug("the context probe on GPU %d trained in %s", index, ", ".join(said.get("trained", [])))
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
    out: dict[int, int] = {}
    for g in gpus:
        if g.backend != "cuda" or not g.healthy:
            continue
        if g.name not in by_model:
            by_model[g.name] = probe_one(nvml, g.device_id)
        figure = by_model[g.name]
        if figure is not None:
            out[g.index] = figure
    return out
