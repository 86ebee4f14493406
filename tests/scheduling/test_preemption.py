"""Which trainings a waiting one preempts, and how the freed GPUs reach it: the scheduler on a real database.

Running trainings are made by the scheduler and the lifecycle's own
transitions (no worker here); the supervisor's part, ``running ->
preempted``, is written the way it writes it. tests/jobs/test_preemption.py
runs the whole path with workers.
"""

from __future__ import annotations

from gpufleet.db.session import session_scope
from gpufleet.scheduling import preemption
from gpufleet.scheduling.scheduler import schedule_pending
from gpufleet.trainings.service import cancel

from scheduling.queue import (
    BOTH,
    active_gpus,
    kinds,
    row,
    start,
    stop_as_preempted,
    submit,
)


@BOTH
def test_victims_are_lowest_priority_then_least_work_lost_and_keep_their_gpus_for_the_preemptor(sim_host):
    s = sim_host("nvlink-all", "4xH100-80GB")
    low = start(s, "low", priority=-5, checkpoint_age_s=3600)
    stale = start(s, "stale", checkpoint_age_s=3600)
    fresh = start(s, "fresh")
    admin = start(s, "admin", admin=True, preemptible=None)
    assert row(s, admin).preemptible is False and row(s, low).preemptible is True
    urgent = submit(s, "urgent", priority=10, gpus=2)

    result = schedule_pending(s)
    assert urgent in result.waiting
    assert {t: row(s, t).preempted_by for t in (low, stale, fresh, admin)} == {
        low: urgent, stale: None, fresh: urgent, admin: None}
    reason = row(s, urgent).wait_reason
    assert reason.startswith("preempting low") and "fresh" in reason, reason
    assert any(k == "preempt" and "preempted by training urgent" in r for k, _, r in kinds(s, fresh))
    assert any(k == "preempt" and "preempting low" in r for k, _, r in kinds(s, urgent))

    # While the victims checkpoint, nothing more is preempted.
    schedule_pending(s)
    assert row(s, stale).preempted_by is None
    assert row(s, urgent).wait_reason.startswith("waits for preempted training(s)")

    # One has stopped: its GPU stays reserved (for the preemptor alone), a newcomer cannot take it.
    stop_as_preempted(s, low)
    low_gpus = active_gpus(s, low)
    assert len(low_gpus) == 1
    newcomer = submit(s, "newcomer", priority=20, gpu_ids=low_gpus)
    schedule_pending(s)
    assert row(s, newcomer).status == "queued" and row(s, low).status == "preempted"

    stop_as_preempted(s, fresh)
    freed = sorted(low_gpus + active_gpus(s, fresh))
    result = schedule_pending(s)
    assert urgent in dict(result.scheduled)
    u = row(s, urgent)
    assert sorted(u.gpu_ids) == freed and u.selection["by"] == "preemption"
    for v in (low, fresh):
        t = row(s, v)
        assert t.status == "queued" and t.restarts == 0 and t.preempted_by is None and active_gpus(s, v) == []
        retry = [r for k, _, r in kinds(s, v) if k == "retry"]
        assert retry and "resume from its checkpoint at step 4" in retry[-1] and "not counted as a restart" in retry[-1]


@BOTH
def test_equal_priority_and_non_preemptible_trainings_are_never_preempted(sim_host):
    s = sim_host("nvlink-all", "2xH100-80GB")
    same = start(s, "same", priority=5)
    keep = start(s, "keep", priority=0, preemptible=False)
    waiting = submit(s, "waiting", priority=5, gpus=1)
    urgent = submit(s, "urgent", priority=10, gpus=2)
    result = schedule_pending(s)
    assert waiting in result.waiting and urgent in result.waiting
    assert row(s, same).preempted_by is None and row(s, keep).preempted_by is None
    assert "needs" in row(s, urgent).wait_reason


@BOTH
def test_a_preemptor_that_goes_away_gives_the_gpus_back_to_its_victim(sim_host):
    s = sim_host("nvlink-all", "1xH100-80GB")
    victim = start(s, "victim")
    urgent = submit(s, "urgent", priority=10)
    schedule_pending(s)
    assert row(s, victim).preempted_by == urgent
    stop_as_preempted(s, victim)
    with session_scope(s) as sess:
        cancel(sess, urgent, "alice")
    result = schedule_pending(s)
    # Requeued (and placed again at once: the GPU is free).
    assert victim in dict(result.scheduled), result.waiting
    retry = [r for k, _, r in kinds(s, victim) if k == "retry"]
    assert retry and "no longer waits" in retry[-1]


@BOTH
def test_the_fair_share_hook_orders_victims_of_equal_priority(sim_host):
    s = sim_host("nvlink-all", "2xH100-80GB")
    a = start(s, "a", owner="ann", checkpoint_age_s=3600)
    b = start(s, "b", owner="bob")
    urgent = submit(s, "urgent", priority=10)
    # Without it, b loses least work; with it, ann is further over her share.
    preemption.set_share_excess(lambda sess, ts: {t.id: 5.0 if t.owner == "ann" else 0.0 for t in ts})
    try:
        schedule_pending(s)
    finally:
        preemption.set_share_excess(None)
    assert row(s, a).preempted_by == urgent and row(s, b).preempted_by is None


def test_preemptible_defaults_to_the_settings_per_role(tmp_path):
    from gpufleet.config import load_settings
    from gpufleet.trainings.service import preemptible_default

    s = load_settings(data_dir=tmp_path)
    assert preemptible_default(s, admin=False) is True and preemptible_default(s, admin=True) is False
    s = load_settings(data_dir=tmp_path, preemptible_default=False, admin_trainings_preemptible=True)
    assert preemptible_default(s, admin=False) is False and preemptible_default(s, admin=True) is True


@BOTH
def test_gpus_kept_for_a_preemptor_go_to_it_even_when_a_higher_priority_training_waits(sim_host):
    s = sim_host("nvlink-all", "2xH100-80GB")
    victim = start(s, "victim")
    start(s, "steady", preemptible=False)
    urgent = submit(s, "urgent", priority=10)
    schedule_pending(s)
    assert row(s, victim).preempted_by == urgent
    stop_as_preempted(s, victim)
    # Arrives after the preemption: it waits for both GPUs, and must not strand the one kept for urgent.
    bigger = submit(s, "bigger", priority=20, gpus=2)
    result = schedule_pending(s)
    assert urgent in dict(result.scheduled), result.waiting
    assert bigger in result.waiting and row(s, victim).status == "queued"


@BOTH
def test_victims_of_equal_priority_go_furthest_over_their_fair_share_first(sim_host):
    from datetime import timedelta

    from gpufleet.db.types import utcnow
    from support.sharing import held_training, make_host

    s = sim_host("nvlink-all", "2xH100-80GB")
    # ann used a host's GPUs for hours lately, bob nothing: ann is far over an equal share.
    now = utcnow()
    held_training(s, make_host(s, 2), "ann", [(0, now - timedelta(hours=5), now - timedelta(minutes=5)),
                                               (1, now - timedelta(hours=5), now - timedelta(minutes=5))])
    a = start(s, "a", owner="ann", checkpoint_age_s=3600)
    b = start(s, "b", owner="bob")
    urgent = submit(s, "urgent", priority=10)
    # Least work lost alone would stop b (it saved just now); fair share stops ann's first.
    schedule_pending(s)
    assert row(s, a).preempted_by == urgent and row(s, b).preempted_by is None


@BOTH
def test_a_session_that_preempts_is_named_as_a_session(sim_host):
    from gpufleet.db.session import write_session
    from gpufleet.interactive import service as sessions
    from gpufleet.wire.sessions import SessionCreate

    s = sim_host("nvlink-all", "2xH100-80GB")
    victims = [start(s, f"low-{i}", priority=-5) for i in range(2)]
    with write_session(s) as sess:
        notebook, _ = sessions.create(sess, s, SessionCreate(gpus=2, hours=1, priority=10, host=s.host_name),
                                      "bob")
        sid = notebook.id
    result = schedule_pending(s)
    assert sid in result.waiting
    for v in victims:
        assert row(s, v).preempted_by == sid
        reasons = [r for k, _, r in kinds(s, v) if k == "preempt"]
        assert reasons and reasons[0].startswith(f"preempted by session {notebook.name} "), reasons
