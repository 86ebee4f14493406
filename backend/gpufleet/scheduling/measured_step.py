"""A recipe's training step measured on a real GPU, one case per fresh process.

What the estimate is held to (``tests/scheduling/test_memory_gpu.py``, ``gpufleet doctor``,
``bench/estimate_accuracy.py --live``). Each case runs in a process of its own, as a
training's rank does: a process that ran other cases first keeps their kernels and the
caching allocator's blocks (the same case measured 1,612 MiB after others and 1,442
alone). The process runs the trainer's step (AdamW, autocast, gradient clipping,
``zero_grad(set_to_none=True)``) three times on ``cuda:0`` and reports, after step 1 and
after step 3 (the steady state, where the peak is), NVML's used memory for itself and the
allocator's allocated and reserved peaks: the fields of the reference file
(``tests/scheduling/data/README.md``), so a live run can be written as a new one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

# One case; argv[1] is [recipe, values, batch, precision]. Prints one JSON line: the
# reference file's fields, or {"skip": why}.
MEASURE = """
import json, os, sys
import pynvml
import torch
from gpufleet.engine.recipes import get_recipe

recipe, values, batch, precision = json.loads(sys.argv[1])
dev = torch.device("cuda", 0)
torch.ones(1, device=dev)  # the context exists


def used():
    pynvml.nvmlInit()
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        return sum(int(p.usedGpuMemory or 0) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)
                   if p.pid == os.getpid())
    finally:
        pynvml.nvmlShutdown()


after_init = used()
if not after_init:
    print(json.dumps({"skip": "the driver does not report this process's memory (no host PID namespace)"}))
    sys.exit(0)
r = get_recipe(recipe)
cfg = r.resolve_config({**values, "global_batch_size": batch, "precision": precision})
model, ds, loss_fn = r.build(cfg, None)
if hasattr(model, "steps_since_fired"):
    model.steps_since_fired[: model.n_latents // 2] = model.dead_steps
    model._n_dead = None
model = model.to(dev)
batch_t = ds.__getitems__(list(range(batch)))
batch_t = tuple(t.to(dev) for t in batch_t) if isinstance(batch_t, tuple) else batch_t.to(dev)
del ds
opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
amp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
after_setup = torch.cuda.memory_allocated(dev)
torch.cuda.reset_peak_memory_stats(dev)
steps = []
for _ in range(3):
    with torch.autocast("cuda", dtype=amp, enabled=amp is not None):
        out = loss_fn(model, batch_t)
    out["loss"].backward()
    del out
    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    opt.step()
    if hasattr(model, "post_step"):
        model.post_step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize(dev)
    nvml = used()
    steps.append({"nvml": nvml, "max_allocated": torch.cuda.max_memory_allocated(dev),
                  "max_reserved": torch.cuda.max_memory_reserved(dev),
                  "nvml_minus_reserved": nvml - torch.cuda.memory_reserved(dev)})
stats = torch.cuda.memory_stats(dev)
keys = ("num_alloc_retries", "segment.all.peak", "segment.large_pool.peak", "segment.small_pool.peak",
        "reserved_bytes.large_pool.peak", "reserved_bytes.small_pool.peak")
print(json.dumps({"case": [recipe, values, batch, precision], "after_init_nvml": after_init,
                  "after_setup_alloc": after_setup, "step1": steps[0], "step3": steps[-1],
                  "segments": {k: stats.get(k, 0) for k in keys}, "torch": torch.__version__,
                  "gpu": torch.cuda.get_device_name(dev)}))
"""


class MeasureFailed(RuntimeError):
    pass


def measure_case(recipe: str, values: dict[str, Any], batch: int, precision: str,
                 timeout_s: float = 600.0) -> dict[str, Any]:
    """The case measured in a fresh process on ``cuda:0``: the reference file's fields, or
    ``{"skip": why}`` where the driver cannot say what the process holds."""
    done = subprocess.run([sys.executable, "-c", MEASURE, json.dumps([recipe, values, batch, precision])],
                          capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        raise MeasureFailed(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])
