"""Drills are step hooks the launcher installs from a rank's environment; the Trainer only calls its hooks.

The drills themselves, end to end through a launcher and a worker, are in
test_launcher.py (GPUFLEET_TRAIN_FAULT), tests/jobs/test_preemption.py
(GPUFLEET_TRAIN_HOLD) and test_parallel_modes.py (GPUFLEET_TEST_RANK_SPEED).
"""

from __future__ import annotations

import pytest

from gpufleet.engine import drills
from gpufleet.engine.rankenv import FAULT_ENV, HOLD_ENV, SPEED_ENV

from .conftest import tiny_mlp


class Recorder:
    def __init__(self) -> None:
        self.before: list[int] = []
        self.computed: list[tuple[int, float]] = []

    def before_step(self, trainer) -> None:
        self.before.append(trainer.step)

    def after_compute(self, trainer, seconds: float) -> None:
        self.computed.append((trainer.step, seconds))


def test_the_trainer_calls_its_hooks_around_every_step() -> None:
    from gpufleet.engine.recipes import get_recipe
    from gpufleet.engine.trainer import Trainer

    r = get_recipe("mlp")
    hook = Recorder()
    result = Trainer(r, r.resolve_config(tiny_mlp(max_steps=3)), devices=["cpu"], hooks=[hook]).train()
    assert result.status == "succeeded"
    assert hook.before == [0, 1, 2]
    # After the optimizer step, before the step is counted; with the time the step took so far.
    assert [step for step, _ in hook.computed] == [0, 1, 2] and all(s > 0 for _, s in hook.computed)


def test_a_rank_without_drills_in_its_environment_gets_no_hooks(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (FAULT_ENV, HOLD_ENV, SPEED_ENV):
        monkeypatch.delenv(name, raising=False)
    assert drills.from_environment(0) == []


def test_the_environment_names_the_drills_each_rank_gets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FAULT_ENV, "1:5:oom")
    monkeypatch.setenv(HOLD_ENV, "3:/tmp/go")
    monkeypatch.setenv(SPEED_ENV, "1:0.5")
    assert drills.from_environment(0) == [drills.Fault(1, 5, "oom"), drills.Hold(3, "/tmp/go")]
    one = drills.from_environment(1)
    assert one[:2] == [drills.Fault(1, 5, "oom"), drills.Hold(3, "/tmp/go")] and isinstance(one[2], drills.SlowRank)


def test_a_fault_fires_on_its_rank_at_its_step_only() -> None:
    class At:
        def __init__(self, rank: int, step: int) -> None:
            self.rank, self.step = rank, step

    fault = drills.Fault(1, 5, "error")
    fault.before_step(At(0, 5))
    fault.before_step(At(1, 4))
    with pytest.raises(drills.InjectedFault, match="rank 1 at step 5"):
        fault.before_step(At(1, 5))
