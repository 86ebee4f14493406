"""The loop never makes the host wait for the device every step: its reads of
device values (``.item()``, ``.cpu()``, ``float()``...) and its collectives come
once per ``log_every`` steps. Counted on CPU in real gloo worlds of one and two
ranks; DDP's own gradient all-reduce (in C++) is not ours to count."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest
import gpufleet
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from gpufleet.engine.distributed import DistributedTrainer, find_free_port
from gpufleet.engine.recipes import get_recipe
from gpufleet.engine.trainer import Trainer
from support.ranks import leave

pytestmark = pytest.mark.slow

HOST_READS = ("item", "cpu", "tolist", "numpy", "__float__", "__int__", "__bool__")
COLLECTIVES = ("all_reduce", "all_gather", "all_gather_object", "broadcast", "barrier", "reduce_scatter")
STEPS, LOG_EVERY = 40, 20


# gpufleet's own code, by where the package is (a checkout named gpufleet holds torch in its .venv too).
OURS = str(Path(gpufleet.__file__).resolve().parent)


def _ours(frame) -> bool:
    return str(Path(frame.f_code.co_filename).resolve()).startswith(OURS)


def _count(counts: Counter) -> None:
    """Wrap the host reads (called from gpufleet's code) and the collectives."""
    for name in HOST_READS:
        real = getattr(torch.Tensor, name)

        def read(self, *a, _real=real, _name=name, **kw):
            if _ours(sys._getframe(1)):
                counts[f"read:{_name}"] += 1
            return _real(self, *a, **kw)

        setattr(torch.Tensor, name, read)
    for name in COLLECTIVES:
        real = getattr(dist, name)

        def collective(*a, _real=real, _name=name, **kw):
            counts[f"collective:{_name}"] += 1
            return _real(*a, **kw)

        setattr(dist, name, collective)


def _train(rank: int, world: int, port: int, out: str) -> None:
    recipe = get_recipe("mlp")
    cfg = recipe.resolve_config(dict(in_features=8, hidden=[16, 16], out_features=3, task="classification",
                                     synthetic_samples=4096, global_batch_size=32, max_steps=STEPS,
                                     log_every=LOG_EVERY, checkpoint_every=10**6, lr=3e-3))
    dt = DistributedTrainer(["cpu"] * world, cfg, master_port=port, use_process_group=True)
    trainer = Trainer(recipe, cfg, dist_trainer=dt, rank=rank)
    trainer.setup()
    counts: Counter = Counter()
    _count(counts)
    trainer.train()
    Path(out, f"rank{rank}.json").write_text(json.dumps(counts))
    trainer.close()
    leave()


def _counts(tmp_path: Path, world: int) -> list[Counter]:
    mp.start_processes(_train, args=(world, find_free_port(), str(tmp_path)), nprocs=world, start_method="spawn")
    return [Counter(json.loads((tmp_path / f"rank{r}.json").read_text())) for r in range(world)]


def _check(counts: Counter) -> None:
    reports = STEPS // LOG_EVERY
    collectives = sum(v for k, v in counts.items() if k.startswith("collective:"))
    reads = sum(v for k, v in counts.items() if k.startswith("read:"))
    # One all-reduce per report carries the metrics, step times, peaks and stop flag.
    assert collectives == reports, counts
    # One copy of the reduced vector to the host per report; what follows reads that copy.
    assert counts["read:cpu"] == reports, counts
    assert reads < STEPS, counts


def test_one_rank_world_syncs_once_per_report(tmp_path: Path) -> None:
    (counts,) = _counts(tmp_path, 1)
    _check(counts)


def test_two_rank_world_syncs_once_per_report(tmp_path: Path) -> None:
    for counts in _counts(tmp_path, 2):
        _check(counts)
