"""Queued and running trainings on a real database, made by the service, the scheduler and the lifecycle.

No worker runs: ``start`` writes the claim the way a worker's supervisor
writes it, so scheduler tests can see running trainings hold GPUs.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from gpufleet.db.models import GPUAllocation, Training, TrainingEvent
from gpufleet.db.session import session_scope, write_session
from gpufleet.db.types import utcnow
from gpufleet.lifecycle.transitions import record_event, transition
from gpufleet.scheduling.scheduler import schedule_pending
from gpufleet.wire.training_requests import TrainingCreate
from gpufleet.trainings.service import create_trainings
from sqlalchemy import select, update

BOTH = pytest.mark.parametrize("sim_host", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)],
                               indirect=True)


def submit(s, name, *, priority=0, gpus=1, preemptible=True, admin=False, owner="alice", gpu_ids=None,
           max_runtime_s=None, max_steps=None):
    config = {"global_batch_size": 64, **({"max_steps": max_steps} if max_steps else {})}
    req = TrainingCreate(name=name, recipe="mlp", config=config, priority=priority,
                         world_size=None if gpu_ids else gpus, gpu_ids=gpu_ids, host=s.host_name,
                         preemptible=preemptible, max_runtime_s=max_runtime_s)
    # BEGIN IMMEDIATE on SQLite: the create reads then writes, and the host's
    # heartbeat thread writes meanwhile ("database is locked" otherwise).
    with write_session(s) as sess:
        (row,) = create_trainings(sess, s, [req], owner, admin=admin)
        return row.id


def start(s, name, *, checkpoint_age_s=0.0, **kw):
    """A training placed by the scheduler and claimed by a (pretend) worker, with a checkpoint that old."""
    tid = submit(s, name, **kw)
    result = schedule_pending(s)
    assert tid in dict(result.scheduled), result.waiting.get(tid)
    with write_session(s) as sess:
        assert transition(sess, tid, ["scheduled"], "running", lease_owner="w", attempt=1,
                          lease_expires_at=utcnow() + timedelta(minutes=5), started_at=utcnow())
        record_event(sess, tid, "checkpoint", reason="checkpoint at step 4", data={"step": 4})
        sess.execute(update(Training).where(Training.id == tid).values(step=4, last_checkpoint="/c/step-4"))
        if checkpoint_age_s:
            sess.execute(update(TrainingEvent).where(TrainingEvent.training_id == tid)
                         .values(time=utcnow() - timedelta(seconds=checkpoint_age_s)))
    return tid


def row(s, tid) -> Training:
    with session_scope(s) as sess:
        t = sess.get(Training, tid)
        sess.expunge(t)
        return t


def kinds(s, tid) -> list[tuple[str, str | None, str]]:
    with session_scope(s) as sess:
        return [(e.kind, e.status, e.reason) for e in sess.execute(
            select(TrainingEvent).where(TrainingEvent.training_id == tid).order_by(TrainingEvent.seq)).scalars()]


def stop_as_preempted(s, tid) -> None:
    """What the victim's supervisor writes once its launcher exited with the checkpoint."""
    t = row(s, tid)
    with write_session(s) as sess:
        assert transition(sess, tid, ["running"], "preempted", reason="preempted", preempted_by=t.preempted_by,
                          lease_owner=None, lease_expires_at=None, exit_code=14)


def active_gpus(s, tid) -> list[int]:
    with session_scope(s) as sess:
        return sorted(sess.execute(select(GPUAllocation.gpu_index).where(
            GPUAllocation.training_id == tid, GPUAllocation.released_at.is_(None))).scalars())
