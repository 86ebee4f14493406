"""The scheduler honours bookings, on a real database with its clock given: before a booking of another's only
work known to end first is placed on its GPUs (short work backfills the time before it), during it only the
booker's, and a wait reason names the booking."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select, update

from gpufleet.bookings import service
from gpufleet.db.models import GPUAllocation, TrainingEvent
from gpufleet.db.session import session_scope, write_session
from gpufleet.lifecycle.transitions import transition
from gpufleet.scheduling import bookings
from gpufleet.db.types import utcnow
from gpufleet.scheduling.queue_position import expected_start
from gpufleet.scheduling.scheduler import schedule_pending
from gpufleet.users.accounts import add_user

from scheduling.queue import BOTH, row, start, submit


def _book(s, owner: str, start: datetime, hours: float, kind: str = "booking"):
    with write_session(s) as sess:
        if kind == "booking":
            add_user(sess, owner, "member")
        return service.create(sess, service.Actor("admin", admin=True),
                              service.Wanted(start, start + timedelta(hours=hours), 4, host=s.host_name,
                                             owner=owner, kind=kind), s, utcnow())


def _minute(t: datetime) -> datetime:
    return t.replace(second=0, microsecond=0) + timedelta(minutes=1)


@BOTH
def test_before_a_booking_only_work_that_ends_first_is_placed_and_the_wait_names_it(sim_host):
    s = sim_host("nvlink-all", "4xH100-80GB")
    begins = _minute(utcnow()) + timedelta(hours=3)
    _book(s, "dana", begins, 2)
    long = submit(s, "long", gpus=2, max_runtime_s=6 * 3600, preemptible=False)
    unbounded = submit(s, "unbounded", gpus=1, preemptible=False)
    short = submit(s, "short", gpus=2, max_runtime_s=3600)
    result = schedule_pending(s)
    assert short in dict(result.scheduled), result.waiting.get(short)  # backfills the three hours before
    assert long in result.waiting and unbounded in result.waiting
    said = row(s, long).wait_reason
    assert f"booked by dana from {begins:%Y-%m-%d %H:%M} UTC" in said and "this training's 6 h would run into it" \
        in said, said
    assert "has no max_runtime_s and no earlier run of its shape, so it cannot be shown to end before" in \
        row(s, unbounded).wait_reason
    assert row(s, long).gpu_ids is None and row(s, unbounded).status == "queued"


@BOTH
def test_during_a_booking_only_the_bookers_work_is_placed_on_its_gpus(sim_host):
    s = sim_host("nvlink-all", "4xH100-80GB")
    begins = _minute(utcnow()) + timedelta(hours=1)
    _book(s, "dana", begins, 2)
    inside = lambda: begins + timedelta(minutes=10)  # noqa: E731 - the pass's clock, ten minutes into it
    other = submit(s, "other", gpus=1, max_runtime_s=60, owner="alice")
    result = schedule_pending(s, clock=inside)
    assert other in result.waiting
    assert f"booked by dana until {begins + timedelta(hours=2):%Y-%m-%d %H:%M} UTC" in row(s, other).wait_reason
    hers = submit(s, "hers", gpus=4, owner="dana", preemptible=False)  # no limit of her own: it is her booking
    result = schedule_pending(s, clock=inside)
    assert hers in dict(result.scheduled), result.waiting.get(hers)
    assert sorted(row(s, hers).gpu_ids) == [0, 1, 2, 3]


@BOTH
def test_a_maintenance_window_keeps_everyone_off(sim_host):
    s = sim_host("nvlink-all", "4xH100-80GB")
    begins = _minute(utcnow())
    _book(s, "admin", begins, 1, kind="maintenance")
    t = submit(s, "any", gpus=1, max_runtime_s=60, owner="admin", admin=True)
    result = schedule_pending(s, clock=lambda: begins + timedelta(minutes=1))
    assert t in result.waiting and "blocked for maintenance until" in row(s, t).wait_reason
    # After the window the same GPUs take it: the clock alone moved.
    result = schedule_pending(s, clock=lambda: begins + timedelta(hours=1, minutes=1))
    assert t in dict(result.scheduled), result.waiting.get(t)


@BOTH
def test_an_unused_booking_is_released_after_its_grace_and_a_used_one_is_kept(sim_host):
    s = sim_host("nvlink-all", "4xH100-80GB")
    s = s.model_copy(update={"booking_release_grace_s": 600.0})
    begins = _minute(utcnow())
    unused = _book(s, "dana", begins, 2)
    other = submit(s, "other", gpus=1, max_runtime_s=60, owner="alice")
    within = schedule_pending(s, clock=lambda: begins + timedelta(minutes=9))  # inside the grace: still hers
    assert other in within.waiting
    after = schedule_pending(s, clock=lambda: begins + timedelta(minutes=11))
    assert other in dict(after.scheduled), after.waiting.get(other)  # released first, then free for anyone
    with write_session(s) as sess:
        b = service.get(sess, unused.id)
        assert b.released_at == begins + timedelta(minutes=11) and "released unused" in b.release_reason
        assert all(r.end_at == b.released_at for r in service.held_gpus(sess, b))

    later = begins + timedelta(hours=3)
    kept = _book(s, "erin", later, 1)
    hers = submit(s, "hers", gpus=2, owner="erin", preemptible=False)
    placed = schedule_pending(s, clock=lambda: later + timedelta(minutes=1))
    assert hers in dict(placed.scheduled), placed.waiting.get(hers)
    schedule_pending(s, clock=lambda: later + timedelta(minutes=30))
    with write_session(s) as sess:
        assert service.get(sess, kept.id).released_at is None


@BOTH
def test_stoppable_work_is_asked_to_stop_ahead_of_a_booking_and_requeued_to_resume_after(sim_host):
    s = sim_host("nvlink-all", "4xH100-80GB").model_copy(update={"stop_grace_s": 60.0})
    begins = _minute(utcnow()) + timedelta(hours=2)
    b = _book(s, "dana", begins, 1)
    # Preemptible, no end known: placed in the two hours before, to be stopped ahead of them.
    tid = start(s, "stoppable", gpus=4, max_runtime_s=None)
    lead = bookings.stop_lead(s.stop_grace_s)
    schedule_pending(s, clock=lambda: begins - lead - timedelta(minutes=1))
    assert row(s, tid).preempted_by is None  # not yet: it has more than its grace left
    schedule_pending(s, clock=lambda: begins - lead)
    asked = row(s, tid)
    assert asked.preempted_by == b.id and asked.status == "running"
    with session_scope(s) as sess:
        said = sess.scalars(select(TrainingEvent.reason).where(TrainingEvent.training_id == tid,
                                                               TrainingEvent.kind == "preempt")).one()
    assert f"booked by dana from {begins:%Y-%m-%d %H:%M} UTC" in said and "stopping ahead" in said
    # The settle step leaves it to checkpoint (the booking still wants the GPUs) ...
    schedule_pending(s, clock=lambda: begins - lead + timedelta(seconds=30))
    assert row(s, tid).preempted_by == b.id
    # ... the worker's stop ends it preempted (the stop contract), and the next pass requeues it, not failed.
    with write_session(s) as sess:
        assert transition(sess, tid, ["running"], "preempted", kind="status", reason="checkpointed at step 4")
        sess.execute(update(GPUAllocation).where(GPUAllocation.training_id == tid, GPUAllocation.released_at.is_(None))
                     .values(released_at=utcnow()))
    during = schedule_pending(s, clock=lambda: begins + timedelta(minutes=1))
    again = row(s, tid)
    assert again.status == "queued" and "resume from its checkpoint at step 4" in _last_reason(s, tid)
    assert tid in during.waiting and "booked by dana until" in again.wait_reason
    after = schedule_pending(s, clock=lambda: begins + timedelta(hours=1))
    assert tid in dict(after.scheduled), after.waiting.get(tid)


def _last_reason(s, tid) -> str:
    with session_scope(s) as sess:
        return sess.scalars(select(TrainingEvent.reason).where(TrainingEvent.training_id == tid)
                            .order_by(TrainingEvent.seq.desc()).limit(1)).one()


@BOTH
def test_the_expected_start_of_work_a_booking_keeps_waiting_is_after_that_booking(sim_host):
    s = sim_host("nvlink-all", "4xH100-80GB")
    begins = _minute(utcnow()) + timedelta(hours=1)
    _book(s, "dana", begins, 2)
    # Four idle GPUs, but its two hours would run into dana's: it starts when her booking ends, and says so.
    long = submit(s, "long", gpus=4, max_runtime_s=2 * 3600, preemptible=False)
    assert long in schedule_pending(s).waiting
    with session_scope(s) as sess:
        when = expected_start(sess, s, s, long)
    assert when == begins + timedelta(hours=2), when
    # Her own work is not kept from her booking: placed now, on the GPUs it runs on into her window.
    hers = submit(s, "hers", gpus=4, max_runtime_s=2 * 3600, preemptible=False, owner="dana", priority=-1)
    placed = schedule_pending(s)
    assert hers in dict(placed.scheduled), placed.waiting.get(hers)
    with session_scope(s) as sess:  # and the one waiting now waits for hers as well as the booking
        assert expected_start(sess, s, s, long) == begins + timedelta(hours=2)


@BOTH
def test_work_with_no_limit_is_judged_by_the_walltime_its_shape_needed_before(sim_host):
    from gpufleet.db.models import Training

    s = sim_host("nvlink-all", "4xH100-80GB")
    begins = _minute(utcnow()) + timedelta(hours=3)
    _book(s, "dana", begins, 2)
    # Two earlier runs of the shape succeeded: 1,000 steps in 40 and in 60 minutes (the slower one counts).
    for name, minutes in (("before-1", 40), ("before-2", 60)):
        done = submit(s, name, gpus=4, max_steps=1000, preemptible=False)
        with write_session(s) as sess:
            sess.execute(update(Training).where(Training.id == done).values(
                status="succeeded", started_at=utcnow() - timedelta(hours=5),
                finished_at=utcnow() - timedelta(hours=5) + timedelta(minutes=minutes)))
    short = submit(s, "short", gpus=4, max_steps=2000, preemptible=False)  # 2 h at that rate, 2.5 h with the factor
    long = submit(s, "long", gpus=4, max_steps=4000, preemptible=False)  # 5 h: into dana's
    assert row(s, short).estimate_key == row(s, long).estimate_key is not None
    result = schedule_pending(s)
    assert short in dict(result.scheduled), result.waiting.get(short)
    said = row(s, long).wait_reason
    assert long in result.waiting and "this training's shape needed up to 5 h before (with a margin), which would " \
        "run into it" in said, said
