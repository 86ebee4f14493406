"""Backfill: a lower-priority training takes GPUs a higher-priority one waits for only if it cannot delay it.

The scheduler on a real database; running trainings are claimed the way a
worker claims them (``scheduling.queue.start``), their progress written as
training_metrics rows, as the supervisor writes them. They are not
preemptible here: the waiting training could otherwise preempt them.
"""

from __future__ import annotations

from datetime import timedelta

from gpufleet.db.models import Training, TrainingMetric
from gpufleet.db.session import write_session
from gpufleet.db.types import utcnow
from gpufleet.scheduling.scheduler import schedule_pending
from sqlalchemy import update

from scheduling.queue import BOTH, row, start, submit


def quick_stops(s):
    # Checkpointing after max_runtime gets this long: part of when a training's GPUs are free again.
    return s.model_copy(update={"stop_grace_s": 5.0})


@BOTH
def test_a_lower_priority_training_no_longer_takes_gpus_a_higher_priority_one_waits_for(sim_host):
    s = quick_stops(sim_host("nvlink-all", "4xH100-80GB"))
    start(s, "running", gpus=2, max_runtime_s=600, preemptible=False)
    big = submit(s, "big", priority=10, gpus=4)
    unbounded = submit(s, "unbounded", gpus=1)
    long = submit(s, "long", gpus=1, max_runtime_s=3600)
    short = submit(s, "short", gpus=1, max_runtime_s=60)
    result = schedule_pending(s)
    assert big in result.waiting and unbounded in result.waiting and long in result.waiting
    # Ends long before the running training's 600 s are up: it delays nobody.
    assert short in dict(result.scheduled)
    reason = row(s, long).wait_reason
    assert reason.startswith("waits behind higher-priority big") and "which needs 4 GPU(s)" in reason, reason
    assert "would not finish (max_runtime_s 3600) before they free up in about" in reason, reason
    assert "has no max_runtime_s" in row(s, unbounded).wait_reason
    assert row(s, unbounded).gpu_ids is None and row(s, long).status == "queued"


@BOTH
def test_measured_progress_says_when_gpus_free_up(sim_host):
    s = quick_stops(sim_host("nvlink-all", "2xH100-80GB"))
    # No max_runtime_s: only its progress (100 steps in 100 s, 100 to go) says it ends in about 100 s.
    r = start(s, "measured", gpus=1, max_steps=200, preemptible=False)
    now = utcnow()
    with write_session(s) as sess:
        sess.add_all([TrainingMetric(training_id=r, step=i, time=now - timedelta(seconds=100 - (i - 1)), loss=1.0,
                                     metrics={}) for i in range(1, 101, 10)] +
                     [TrainingMetric(training_id=r, step=100, time=now, loss=1.0, metrics={})])
        sess.execute(update(Training).where(Training.id == r).values(step=100))
    big = submit(s, "big", priority=10, gpus=2)
    slow = submit(s, "slow", gpus=1, max_runtime_s=300)
    quick = submit(s, "quick", gpus=1, max_runtime_s=30)
    result = schedule_pending(s)
    assert big in result.waiting and slow in result.waiting
    assert quick in dict(result.scheduled), result.waiting.get(quick)
    assert "would not finish (max_runtime_s 300) before they free up in about 1m" in row(s, slow).wait_reason


@BOTH
def test_gpus_outside_the_reservation_and_equal_priorities_are_not_held_back(sim_host):
    s = quick_stops(sim_host("nvlink-all", "4xH100-80GB"))
    start(s, "holder", gpu_ids=[0, 1], preemptible=False)
    pinned = submit(s, "pinned", priority=10, gpu_ids=[0, 1])
    peer = submit(s, "peer", priority=10, gpus=1)
    anyone = submit(s, "anyone", gpus=1)
    result = schedule_pending(s)
    assert pinned in result.waiting
    # The waiting training needs GPUs 0 and 1 only: 2 and 3 delay it in no way.
    assert peer in dict(result.scheduled) and anyone in dict(result.scheduled), result.waiting
    assert {row(s, peer).gpu_ids[0], row(s, anyone).gpu_ids[0]} == {2, 3}
