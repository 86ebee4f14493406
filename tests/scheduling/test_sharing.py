"""Group and weekly quotas, and the fair-share order, in the scheduler pass on a real database."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import select

from gpufleet.db.models import Training
from gpufleet.db.session import session_scope, write_session
from gpufleet.db.types import utcnow
from gpufleet.scheduling import fairshare
from gpufleet.scheduling.quotas import may_borrow
from gpufleet.users.accounts import add_user
from gpufleet.users.groups import Limits, add_member, create_group, set_group_quota, set_user_quota
from scheduling.queue import start
from support.sharing import held_training, make_host

BOTH = pytest.mark.parametrize("sim_host", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)],
                               indirect=True)


def _people(s, *names: str) -> list[str]:
    real = [f"{n}{uuid.uuid4().hex[:6]}" for n in names]
    with session_scope(s) as sess:
        for n in real:
            add_user(sess, n)
    return real


def _submit(s, owner: str, name: str, **kw) -> uuid.UUID:
    from gpufleet.wire.training_requests import TrainingCreate
    from gpufleet.trainings.service import create_trainings

    with write_session(s) as sess:
        (row,) = create_trainings(sess, s, [TrainingCreate(name=name, recipe="mlp", config={"global_batch_size": 8},
                                                           host=s.host_name, **kw)], owner)
        return row.id


def _row(s, tid: uuid.UUID) -> Training:
    with session_scope(s) as sess:
        t = sess.scalar(select(Training).where(Training.id == tid))
        sess.expunge(t)
        return t


@BOTH
def test_group_quota_counts_every_member_and_outsiders_go_first(sim_host) -> None:
    from gpufleet.scheduling.scheduler import schedule_pending

    s = sim_host("nvlink-all", "4xH100-80GB")
    alice, bob, carol = _people(s, "alice", "bob", "carol")
    group = "vision" + uuid.uuid4().hex[:6]
    with session_scope(s) as sess:
        create_group(sess, group)
        add_member(sess, group, alice)
        add_member(sess, group, bob)
        set_group_quota(sess, group, Limits(max_gpus=3))
    a = _submit(s, alice, "a", world_size=2, distributed=True, preemptible=False)
    b = _submit(s, bob, "b", world_size=2, distributed=True, preemptible=False)  # would make the group hold 4
    c = _submit(s, carol, "c", preemptible=False)
    result = schedule_pending(s)
    placed = {tid for tid, _ in result.scheduled}
    assert a in placed and c in placed and b not in placed
    assert _row(s, b).wait_reason == (f"group {group} holds 2 of 3 GPUs in its quota; this training needs 2 more; "
                                      "a preemptible training may borrow idle GPUs beyond it")
    assert _row(s, b).status == "queued"


@BOTH
def test_weekly_gpu_hours_quota_counts_held_time_of_the_last_seven_days(sim_host) -> None:
    from gpufleet.scheduling.scheduler import schedule_pending

    s = sim_host("nvlink-all", "2xH100-80GB")
    (alice,) = _people(s, "alice")
    now = utcnow()
    other = make_host(s, 2)
    # 6 h three days ago and 4 h nine days ago (outside the week): 6 GPU-hours count.
    held_training(s, other, alice, [(0, now - timedelta(days=3, hours=6), now - timedelta(days=3))])
    held_training(s, other, alice, [(1, now - timedelta(days=9, hours=4), now - timedelta(days=9))])
    with session_scope(s) as sess:
        set_user_quota(sess, alice, Limits(gpu_hours_per_week=6))
    tid = _submit(s, alice, "weekly", preemptible=False)
    assert tid in schedule_pending(s).waiting
    assert _row(s, tid).wait_reason == (f"{alice} held 6.0 of 6 GPU-hours in the last 7 days (their weekly quota);"
                                        " it waits until older use leaves the week; a preemptible training may"
                                        " borrow idle GPUs beyond it")
    with session_scope(s) as sess:
        set_user_quota(sess, alice, Limits(gpu_hours_per_week=7))
    assert tid in {t for t, _ in schedule_pending(s).scheduled}


@BOTH
def test_fair_share_puts_the_owner_with_less_recent_use_first(sim_host) -> None:
    from gpufleet.scheduling.scheduler import schedule_pending

    s = sim_host("nvlink-all", "1xH100-80GB")
    alice, bob = _people(s, "alice", "bob")
    now = utcnow()
    held_training(s, make_host(s, 1), alice, [(0, now - timedelta(hours=5), now - timedelta(hours=1))])
    older = _submit(s, alice, "older")
    _submit(s, bob, "newer")
    # Plain priority-then-age first, on a copy of the queue's state: alice's older training wins.
    plain = schedule_pending(s.model_copy(update={"fair_share": False}), max_rows=2)
    assert [t for t, _ in plain.scheduled] == [older]
    with session_scope(s) as sess:
        f = fairshare.owner_factors(sess, s, s, [alice, bob])
    assert f[bob] == 1.0 and f[alice] < 0.5


@BOTH
def test_fair_share_order_places_the_newer_training_of_the_lighter_user(sim_host) -> None:
    from gpufleet.scheduling.scheduler import schedule_pending

    s = sim_host("nvlink-all", "1xH100-80GB")
    alice, bob = _people(s, "alice", "bob")
    now = utcnow()
    held_training(s, make_host(s, 1), alice, [(0, now - timedelta(hours=5), now - timedelta(hours=1))])
    older = _submit(s, alice, "older")
    newer = _submit(s, bob, "newer")
    result = schedule_pending(s)
    assert [t for t, _ in result.scheduled] == [newer]
    assert older in result.waiting


def test_factor_is_slurms_two_to_the_minus_usage_over_share() -> None:
    f = fairshare.factors({"a": 300.0, "b": 100.0}, {"a": 1.0, "b": 1.0}, ["a", "b", "c"])
    # a: 3/4 of the usage against a third of the shares.
    assert f["a"] == pytest.approx(2 ** (-0.75 / (1 / 3)))
    assert f["b"] == pytest.approx(2 ** (-0.25 / (1 / 3)))
    assert f["c"] == 1.0
    doubled = fairshare.factors({"a": 300.0, "b": 100.0}, {"a": 2.0, "b": 1.0}, ["a", "b"])
    assert doubled["a"] == pytest.approx(2 ** (-0.75 / (2 / 3)))


def test_decay_halves_usage_every_half_life() -> None:
    class Sess:
        def __init__(self, rows):
            self.rows = rows

        def execute(self, _stmt):
            return self.rows

    now = utcnow()
    hour = timedelta(hours=1)
    recent = fairshare.decayed_usage(Sess([("a", now - hour, now)]), 3600.0, now)["a"]
    old = fairshare.decayed_usage(Sess([("a", now - 2 * hour, now - hour)]), 3600.0, now)["a"]
    assert old == pytest.approx(recent / 2)


def test_only_a_preemptible_training_borrows_beyond_its_quota() -> None:
    assert may_borrow(Training(name="x", owner="a", recipe="mlp", config={}, preemptible=True)) is True
    assert may_borrow(Training(name="x", owner="a", recipe="mlp", config={}, preemptible=False)) is False


@BOTH
def test_a_preemptible_training_borrows_idle_gpus_and_a_training_within_quota_takes_them_back(sim_host) -> None:
    from gpufleet.db.models import TrainingEvent
    from gpufleet.scheduling.scheduler import schedule_pending

    s = sim_host("nvlink-all", "2xH100-80GB")
    alice, bob = _people(s, "alice", "bob")
    with session_scope(s) as sess:
        set_user_quota(sess, alice, Limits(max_gpus=1))
    # Each placed in its own pass and running. "mine" saved its work long ago, "borrowed" just now:
    # least work lost alone would pick "borrowed" anyway; the quota makes both of alice's trainings
    # eligible at bob's own priority.
    mine = start(s, "mine", owner=alice, checkpoint_age_s=3600)
    borrowed = start(s, "borrowed", owner=alice)  # over her quota, but preemptible: it may use the idle GPU
    # Bob is within his quota (he has none), at the same priority: he takes a GPU back.
    theirs = _submit(s, bob, "theirs")
    assert theirs in schedule_pending(s).waiting
    victims = {t for t in (mine, borrowed) if _row(s, t).preempted_by == theirs}
    assert len(victims) == 1, victims
    assert _row(s, theirs).wait_reason.startswith("preempting"), _row(s, theirs).wait_reason
    with session_scope(s) as sess:
        said = sess.scalars(select(TrainingEvent.reason).where(TrainingEvent.training_id.in_(victims),
                                                                TrainingEvent.kind == "preempt")).all()
    assert any(f"borrowed beyond {alice}'s quota" in r for r in said), said


@BOTH
def test_a_borrower_never_takes_gpus_back_from_another_borrower(sim_host) -> None:
    from gpufleet.scheduling.scheduler import schedule_pending

    s = sim_host("nvlink-all", "1xH100-80GB")
    alice, bob = _people(s, "alice", "bob")
    with session_scope(s) as sess:
        set_user_quota(sess, alice, Limits(max_gpus=0))
        set_user_quota(sess, bob, Limits(max_gpus=0))
    first = start(s, "first", owner=alice)  # placed (borrowing) and running
    second = _submit(s, bob, "second")  # over his own quota too: he may only borrow what is idle
    assert second in schedule_pending(s).waiting
    assert _row(s, first).preempted_by is None


@BOTH
def test_a_long_over_quota_queue_costs_one_check_per_owner_and_pass(sim_host) -> None:
    from gpufleet.scheduling.scheduler import schedule_pending

    s = sim_host("nvlink-all", "4xH100-80GB")
    (alice,) = _people(s, "alice")
    with session_scope(s) as sess:
        set_user_quota(sess, alice, Limits(max_gpus=1))
    first = _submit(s, alice, "first", preemptible=False)
    waiting = [_submit(s, alice, f"w{i}", preemptible=False) for i in range(5)]
    schedule_pending(s)  # places the first; the others learn why they wait
    reason = f"{alice} holds 1 of 1 GPUs in their quota; a preemptible training may borrow idle GPUs beyond it"
    assert {_row(s, t).wait_reason for t in waiting} == {reason}
    again = schedule_pending(s)
    # One of them was checked under the lock; the rest, already saying so, were skipped.
    assert len(set(again.waiting) & set(waiting)) == 1
    assert {_row(s, t).wait_reason for t in waiting} == {reason} and _row(s, first).status == "scheduled"


@BOTH
def test_gpus_sent_to_a_slurm_pool_count_against_the_quota_and_a_pool_training_past_it_is_held_back(
        sim_host) -> None:
    from sqlalchemy import update

    from gpufleet.db.pools import Pool, PoolJob
    from gpufleet.pools.submit import submit_waiting
    from gpufleet.scheduling.scheduler import schedule_pending

    s = sim_host("nvlink-all", "4xH100-80GB")
    (alice,) = _people(s, "alice")
    with write_session(s) as sess:
        set_user_quota(sess, alice, Limits(max_gpus=2))
        pool = Pool(name="inst" + uuid.uuid4().hex[:6], options={"partition": "gpu"}, gpus_per_node=8,
                    checkpoint_root="/shared/gpufleet", python="python3")
        sess.add(pool)
        sess.flush()
        # Two GPUs of hers run on the pool (a job Slurm runs), and one more training waits to be sent there.
        there = Training(name="there", owner=alice, recipe="mlp", config={}, status="running", pool=pool.name,
                         world_size=2, attempt=1)
        waiting = Training(name="next", owner=alice, recipe="mlp", config={}, status="queued", pool=pool.name,
                           world_size=1)
        sess.add_all([there, waiting])
        sess.flush()
        sess.add(PoolJob(training_id=there.id, pool_id=pool.id, attempt=1, job_id="77", account=alice,
                         state="running", output="/shared/gpufleet/slurm-77.out"))
        there_id, waiting_id = there.id, waiting.id
    here = _submit(s, alice, "here", preemptible=False)
    schedule_pending(s)
    full = f"{alice} holds 2 of 2 GPUs in their quota"
    assert _row(s, here).status == "queued" and _row(s, here).wait_reason.startswith(full)
    # The pool's submitter holds the pool training back too, before asking Slurm anything.
    assert submit_waiting(s) == 0
    held = _row(s, waiting_id)
    assert held.status == "queued" and held.wait_reason == full
    with session_scope(s) as sess:
        assert sess.scalar(select(PoolJob.id).where(PoolJob.training_id == waiting_id)) is None
    # The pool job ends: its GPUs no longer count, and the team's training is placed.
    with write_session(s) as sess:
        sess.execute(update(PoolJob).where(PoolJob.training_id == there_id).values(ended_at=utcnow(),
                                                                                  state="COMPLETED"))
    placed = {tid for tid, _ in schedule_pending(s).scheduled}
    assert here in placed
