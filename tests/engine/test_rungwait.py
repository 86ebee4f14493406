"""A sweep trial's ranks wait at each rung's step for the verdict (engine/rungwait.py), which the worker gives
by creating a marker (jobs/rung_gate.py). Real files and a real Trainer on the CPU; no server."""

from __future__ import annotations

import threading
import time
import uuid
from types import SimpleNamespace

from gpufleet.engine.rungwait import RungGate
from gpufleet.jobs.rung_gate import RungRelease


def test_the_rank_waits_at_its_rung_until_the_worker_lets_it_past(tmp_path):
    progress = tmp_path / "progress-1.jsonl"
    gate = RungGate(str(progress), [10, 40], should_stop=lambda: False)
    release = RungRelease(SimpleNamespace(rung_steps=[10, 40], passed_rung_step=None), progress)
    at = SimpleNamespace(step=10)
    gate.before_step(SimpleNamespace(step=9))  # not a rung: no wait at all
    assert gate.waited == {}
    assert release.waiting(10) and release.flush_every(10, 1.0) < 1.0 and release.flush_every(9, 1.0) == 1.0
    done = threading.Event()
    threading.Thread(target=lambda: (gate.before_step(at), done.set()), daemon=True).start()
    assert not done.wait(0.5)  # held at step 10 while no verdict came
    release.let_past(10)
    assert done.wait(5) and 0.4 < gate.waited[10] < 5
    assert not release.waiting(10) and release.waiting(40)
    gate.before_step(at)  # once per rung: the step after it does not wait again
    assert list(gate.waited) == [10]


def test_a_stop_ends_the_wait_and_no_verdict_ends_it_after_the_limit(tmp_path):
    stop = threading.Event()
    gate = RungGate(str(tmp_path / "p.jsonl"), [10], should_stop=stop.is_set)
    threading.Timer(0.3, stop.set).start()
    began = time.monotonic()
    gate.before_step(SimpleNamespace(step=10))
    assert 0.25 < time.monotonic() - began < 5
    patient = RungGate(str(tmp_path / "q.jsonl"), [10], should_stop=lambda: False, wait_s=0.2)
    patient.before_step(SimpleNamespace(step=10))
    assert 0.15 < patient.waited[10] < 5


def test_the_marker_never_follows_a_link_the_training_left(tmp_path):
    progress = tmp_path / "progress-1.jsonl"
    outside = tmp_path / "outside"
    (tmp_path / "progress-1.jsonl.passed-10").symlink_to(outside)
    RungRelease(SimpleNamespace(rung_steps=[10], passed_rung_step=None), progress).let_past(10)
    assert not outside.exists()  # the link is left as it was; nothing is created through it


def test_a_trainer_reports_at_a_rung_and_waits_there_before_its_next_step(tmp_path):
    from gpufleet.engine.progress import ProgressWriter, read_progress
    from gpufleet.engine.recipes import get_recipe
    from gpufleet.engine.trainer import Trainer

    recipe = get_recipe("mlp")
    config = recipe.resolve_config({"max_steps": 12, "global_batch_size": 8, "log_every": 100,
                                    "checkpoint_every": 1000, "synthetic_samples": 64, "hidden": [4]})
    progress = tmp_path / f"progress-{uuid.uuid4().hex[:6]}.jsonl"
    gate = RungGate(str(progress), [5], should_stop=lambda: False)
    trainer = Trainer(recipe, config, devices=["cpu"], checkpoint_dir=tmp_path / "ckpt",
                      progress=ProgressWriter(progress), hooks=[gate], report_at=[5])
    seen: list[int] = []

    def worker() -> None:  # what the supervisor does: sees the rung's value, then (the driver said go on) lets it past
        while not any(line["type"] == "step" for line in read_progress(progress)):
            time.sleep(0.01)
        time.sleep(0.5)
        seen.extend(line["step"] for line in read_progress(progress) if line["type"] == "step")
        RungRelease(SimpleNamespace(rung_steps=[5], passed_rung_step=None), progress).let_past(5)

    threading.Thread(target=worker, daemon=True).start()
    result = trainer.train()
    assert result.status == "succeeded" and result.step == 12
    steps = [line["step"] for line in read_progress(progress) if line["type"] == "step"]
    assert steps == [5, 12]  # the rung's step is reported whatever log_every says
    assert seen == [5] and gate.waited[5] > 0.4  # half a second at step 5, no step past it


def test_a_trial_stopped_while_it_waits_at_its_rung_runs_no_step_past_it(tmp_path):
    from gpufleet.engine.progress import ProgressWriter, read_progress
    from gpufleet.engine.recipes import get_recipe
    from gpufleet.engine.trainer import Trainer

    recipe = get_recipe("mlp")
    config = recipe.resolve_config({"max_steps": 12, "global_batch_size": 8, "log_every": 100,
                                    "checkpoint_every": 1000, "synthetic_samples": 64, "hidden": [4]})
    progress = tmp_path / f"progress-{uuid.uuid4().hex[:6]}.jsonl"
    pruned = threading.Event()
    gate = RungGate(str(progress), [5], should_stop=pruned.is_set)
    trainer = Trainer(recipe, config, devices=["cpu"], checkpoint_dir=tmp_path / "ckpt",
                      progress=ProgressWriter(progress),
                      hooks=[gate], report_at=[5], should_stop=pruned.is_set)

    def driver() -> None:  # the rung's value seen, the verdict is a stop (the sweep pruned it)
        while not any(line["type"] == "step" for line in read_progress(progress)):
            time.sleep(0.01)
        time.sleep(0.3)
        pruned.set()

    threading.Thread(target=driver, daemon=True).start()
    result = trainer.train()
    # It used to compute step 6 (and checkpoint there) after the stop ended its wait at step 5.
    assert result.status == "interrupted" and result.step == 5, result
    assert [line["step"] for line in read_progress(progress) if line["type"] == "step"] == [5]
    assert [line["step"] for line in read_progress(progress) if line["type"] == "checkpoint"] == [5]
