"""The config a launch runs with: the training's resolved config, plus what only the chosen GPUs can say.

For ``parallel_mode: proportional`` without ``rank_shares`` the first shares
follow the GPUs' data-sheet speeds (``scheduling.weights.spec_tflops``), in
rank order, so a fast GPU gets its larger micro-batch from the first step;
the Trainer then re-tunes them from measured step times at each checkpoint.
A resumed attempt takes the shares its checkpoint saved.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import select

from gpufleet.config import StoreSettings, WorkerSettings
from gpufleet.db.models import GPU, GPUAllocation, Training
from gpufleet.db.session import session_scope
from gpufleet.jobs.logs import BoundedLog
from gpufleet.scheduling.weights import spec_tflops
from gpufleet.engine.resumepoint import seed_from
from gpufleet.engine.modes import proportional_shares

# A GPU whose model and generation are unknown counts as this many TFLOPS.
_UNKNOWN_TFLOPS = 60.0


def launch_config(settings: StoreSettings, t: Training) -> dict[str, Any]:
    config = dict(t.config)
    if config.get("parallel_mode") != "proportional" or config.get("rank_shares") or (t.world_size or 1) < 2:
        return config
    with session_scope(settings) as sess:
        gpus = {g.index: (g.name or "", g.compute_capability) for g in sess.execute(
            select(GPU).join(GPUAllocation, GPUAllocation.gpu_id == GPU.id).where(
                GPUAllocation.training_id == t.id, GPUAllocation.released_at.is_(None))).scalars()}
    order = t.gpu_ids or sorted(gpus)
    if len(order) < 2 or any(i not in gpus for i in order):
        return config
    speeds = [spec_tflops(*gpus[i]) or _UNKNOWN_TFLOPS for i in order]
    config["rank_shares"] = proportional_shares(speeds, int(config["global_batch_size"]))
    return config


def seed_clone(settings: WorkerSettings, t: Training, ckpt_dir: Path, log: BoundedLog) -> None:
    """A training started from another's checkpoint (``resumed_from``): copy that checkpoint in first."""
    if t.resumed_from is None:
        return
    copied = seed_from(Path(settings.checkpoint_root) / str(t.resumed_from), ckpt_dir)  # type: ignore[arg-type]
    if copied:
        log.line(f"[gpufleet] starting from checkpoint {copied} of training {t.resumed_from}")
