"""A rank's start-up, phase by phase, in the progress file (engine/startup.py)."""

from __future__ import annotations

from pathlib import Path

from gpufleet.engine.progress import ProgressWriter, read_progress
from gpufleet.engine.recipes import get_recipe
from gpufleet.engine.startup import PHASES, StartupClock, process_start
from gpufleet.engine.trainer import Trainer

from .conftest import tiny_mlp


def test_the_first_report_carries_each_phase(tmp_path: Path) -> None:
    recipe = get_recipe("mlp")
    cfg = recipe.resolve_config(tiny_mlp(max_steps=6, log_every=3, checkpoint_every=100))
    trainer = Trainer(recipe, cfg, devices=["cpu"], progress=ProgressWriter(tmp_path / "p.jsonl"))
    trainer.train()
    trainer.close()
    (line,) = [x for x in read_progress(tmp_path / "p.jsonl") if x["type"] == "startup"]
    assert line["phases"] == list(PHASES)
    (rank0,) = line["per_rank"]
    seconds = dict(zip(PHASES, rank0))
    assert all(v >= 0 for v in rank0)
    assert seconds["imports"] > 0  # this process started before the trainer
    assert seconds["launcher"] == 0 and seconds["process_group"] == 0  # in-process, one rank
    assert seconds["model"] > 0 and seconds["first_step"] > 0


def test_process_start_is_in_the_past() -> None:
    import os
    import time

    began = process_start(os.getpid())
    assert began is not None and began <= time.time()
    clock = StartupClock()
    clock.mark("device")
    assert len(clock.seconds()) == len(PHASES)


def test_a_warm_launchers_phase_counts_from_the_hand_over(monkeypatch) -> None:
    import os
    import time

    from gpufleet.engine import rankenv

    # A rank of a pool launcher: its parent process started long ago, its training 1.5 s before this rank.
    began = process_start(os.getpid())
    monkeypatch.setenv(rankenv.RANK_SPAWNED_ENV, "1")
    monkeypatch.setenv(rankenv.LAUNCH_BEGAN_ENV, repr(began - 1.5))
    assert StartupClock().seconds()[0] == 1.5
    # The launcher running its only rank itself: imports count from the hand-over, not from the
    # process's start in the pool (this test's process started at least its imports ago).
    monkeypatch.delenv(rankenv.RANK_SPAWNED_ENV)
    age = time.time() - began
    monkeypatch.setenv(rankenv.LAUNCH_BEGAN_ENV, repr(time.time()))
    launcher, imports = StartupClock().seconds()[:2]
    assert launcher == 0 and imports < age / 2
