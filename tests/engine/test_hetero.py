"""Speed-proportional batches: unequal micro-batches on real gloo ranks give the single-process update."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from gpufleet.engine.distributed import find_free_port
from gpufleet.engine.hetero import proportional_shares, rank_slices, retune_shares, weighted_step
from support.ranks import leave

GLOBAL = 256
STEPS = 20


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 16))


def _data() -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return torch.randn(STEPS * GLOBAL, 16, generator=g)


def _loss(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return ((model(x) - x.flip(1)) ** 2).mean()


def _train(shares: list[int], rank: int) -> torch.Tensor:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    data = _data()
    mine = rank_slices(shares)[rank]
    for step in range(STEPS):
        batch = data[step * GLOBAL:(step + 1) * GLOBAL]
        weighted_step(model, opt, _loss, batch[mine], GLOBAL)
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _rank(rank: int, world: int, port: int, shares: list[int], out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.save(_train(shares, rank), f"{out}.{rank}")
    leave()


def test_micro_batches_96_and_160_match_one_process_with_256(tmp_path):
    single = _train([GLOBAL], 0)
    out = str(tmp_path / "params")
    mp.start_processes(_rank, args=(2, find_free_port(), [96, 160], out), nprocs=2, start_method="spawn")
    p0, p1 = torch.load(f"{out}.0"), torch.load(f"{out}.1")
    assert torch.equal(p0, p1)  # the ranks agree exactly
    assert (p0 - single).abs().max().item() < 1e-5


def test_unweighted_unequal_batches_would_differ():
    # The weighting is what makes 96/160 equal to 256: averaging the two ranks' means is another update.
    torch.manual_seed(0)
    x = _data()[:GLOBAL]
    m = _model()
    full = torch.autograd.grad(_loss(m, x), list(m.parameters()))
    parts = [torch.autograd.grad(_loss(m, x[s]), list(m.parameters())) for s in rank_slices([96, 160])]
    weighted = [(96 * a + 160 * b) / GLOBAL for a, b in zip(*parts)]
    naive = [(a + b) / 2 for a, b in zip(*parts)]
    assert max((w - f).abs().max().item() for w, f in zip(weighted, full)) < 1e-6
    assert max((n - f).abs().max().item() for n, f in zip(naive, full)) > 1e-4


def test_shares_follow_speeds_and_keep_the_global_batch():
    assert proportional_shares([5, 3, 2], 100) == [50, 30, 20]
    assert proportional_shares([1, 1], 256) == [128, 128]
    assert sum(proportional_shares([0.7, 0.2, 0.1], 257)) == 257
    assert proportional_shares([1000, 1], 4) == [3, 1]  # never zero
    with pytest.raises(ValueError, match="> 0"):
        proportional_shares([1, 0], 64)
    with pytest.raises(ValueError, match="one sample each"):
        proportional_shares([1, 1, 1], 2)


def test_retuning_moves_shares_toward_measured_speed():
    # Equal shares, rank 1 takes twice as long: it runs at half speed.
    shares = [128, 128]
    shares = retune_shares(shares, [1.0, 2.0], gain=1.0)
    assert shares == [171, 85]
    # At the right split the times are equal and the shares stay.
    assert retune_shares(shares, [1.0, 1.0 * (85 / 171) * 2], gain=1.0) == [171, 85]
    # Half gain goes half way.
    assert retune_shares([128, 128], [1.0, 2.0], gain=0.5) == [150, 106]
    with pytest.raises(ValueError):
        retune_shares([128, 128], [1.0], gain=0.5)


def test_slow_rank_hook_halves_only_the_named_rank(monkeypatch):
    from gpufleet.engine import drills

    slept: list[float] = []
    monkeypatch.setattr(drills.time, "sleep", slept.append)
    monkeypatch.setenv(drills.SPEED_ENV, "1:0.5")
    assert drills.slow_rank_hook(0) is None
    drills.slow_rank_hook(1)(0.2)
    assert slept == [pytest.approx(0.2)]  # as long again as its computation: half speed
    monkeypatch.setenv(drills.SPEED_ENV, "1:2")
    with pytest.raises(ValueError, match="speed"):
        drills.slow_rank_hook(1)


def test_shares_change_only_at_checkpoint_boundaries_and_resume_exactly():
    from gpufleet.engine.hetero import ShareTuner

    t = ShareTuner.from_speeds([1, 1], 256, gain=1.0)
    assert t.shares == [128, 128]
    for _ in range(5):
        t.record([0.10, 0.20])  # rank 1 at half speed
    assert t.shares == [128, 128]  # nothing moves between checkpoints
    assert t.at_checkpoint() == [171, 85]
    assert t.at_checkpoint() == [171, 85]  # no new times: unchanged
    saved = t.state_dict()
    resumed = ShareTuner([128, 128], gain=0.5)
    resumed.load_state_dict(saved)
    assert resumed.shares == [171, 85] and resumed.gain == 1.0
    with pytest.raises(ValueError, match="do not fit"):
        ShareTuner([100, 100]).load_state_dict(saved)
    with pytest.raises(ValueError, match="2 ranks but 3"):
        t.record([0.1, 0.1, 0.1])
