"""Stop-and-resume equals an uninterrupted run (CPU, exact)."""

from __future__ import annotations

from pathlib import Path

import torch

from gpufleet.engine import checkpoint as ckpt
from gpufleet.engine.recipes import get_recipe
from gpufleet.engine.trainer import Trainer

from .conftest import tiny_mlp, tiny_sae


def _run(recipe: str, cfg: dict, ckpt_dir: Path, stop_at: int | None = None) -> Trainer:
    r = get_recipe(recipe)
    t: Trainer | None = None

    def should_stop() -> bool:
        return stop_at is not None and t is not None and t.step >= stop_at

    t = Trainer(r, r.resolve_config(cfg), devices=["cpu"], checkpoint_dir=ckpt_dir, should_stop=should_stop)
    t.train()
    return t


def test_stopped_and_resumed_run_equals_uninterrupted(tmp_path: Path):
    # Short epochs (256 samples / 32 = 8 steps), so the stop lands mid-epoch and
    # the resumed run must also cross epoch boundaries with the right shuffle.
    for name, cfg in (("sae", tiny_sae(dead_steps=3, aux_coeff=0.1, synthetic_samples=256)),
                      ("mlp", tiny_mlp(synthetic_samples=256, lr_schedule="cosine", warmup_steps=4))):
        cfg = {**cfg, "max_steps": 20, "checkpoint_every": 7}
        full = _run(name, cfg, tmp_path / name / "full")
        stopped = _run(name, cfg, tmp_path / name / "split", stop_at=11)
        assert stopped.step == 11
        assert ckpt.newest_checkpoint(tmp_path / name / "split").name == "step-11"
        resumed = _run(name, cfg, tmp_path / name / "split")
        assert resumed.step == 20
        a, b = full.raw_model.state_dict(), resumed.raw_model.state_dict()
        for k in a:
            assert torch.equal(a[k], b[k]), f"{name}: {k} differs after resume"
        oa, ob = full.optimizer.state_dict()["state"], resumed.optimizer.state_dict()["state"]
        for i in oa:
            assert torch.equal(oa[i]["exp_avg_sq"], ob[i]["exp_avg_sq"])
        assert full.scheduler.get_last_lr() == resumed.scheduler.get_last_lr()
        # keep_checkpoints=3: only the newest three remain.
        assert [s for s, _ in ckpt.list_checkpoints(tmp_path / name / "split")] == [11, 14, 20]


def test_resume_with_half_the_micro_batch_matches(tmp_path: Path):
    # The out-of-memory rebalance: resume with half the micro batch and twice
    # the accumulation. 250 samples do not divide into 32-sample steps, so the
    # epoch tail must be cut the same way in both layouts.
    cfg = {**tiny_mlp(synthetic_samples=250), "max_steps": 20, "checkpoint_every": 100}
    full = _run("mlp", cfg, tmp_path / "full")
    _run("mlp", cfg, tmp_path / "split", stop_at=11)
    resumed = _run("mlp", {**cfg, "micro_batch_size": 16, "grad_accum_steps": 2}, tmp_path / "split")
    assert resumed.step == 20
    a, b = full.raw_model.state_dict(), resumed.raw_model.state_dict()
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-5


def test_resume_refuses_a_checkpoint_of_another_shape(tmp_path: Path):
    import pytest

    from gpufleet.engine.config import TrainingConfigError

    cfg = {**tiny_mlp(), "max_steps": 4, "checkpoint_every": 2}
    _run("mlp", cfg, tmp_path)
    with pytest.raises(TrainingConfigError, match="does not fit"):
        _run("mlp", {**cfg, "hidden": [32], "max_steps": 6}, tmp_path)
