"""The idle watch on a real database: history rows as the agent stores them, judged by ``idle.watch``."""

from __future__ import annotations

from datetime import timedelta

from gpufleet.db.models import GPUAllocation, GPUMetricsHistory
from gpufleet.db.session import write_session
from gpufleet.db.types import utcnow
from gpufleet.scheduling import idle
from sqlalchemy import select

from scheduling.queue import BOTH, kinds, row, start


def settings_for(s, action):
    return s.model_copy(update={"idle_action": action, "idle_window_s": 600.0, "idle_threshold_percent": 5.0})


def history(s, tid, utilizations, *, every_s=60, end=None, busy_gpu=None):
    """One sample per GPU of the training every ``every_s`` seconds, the last at ``end`` (now);
    ``busy_gpu`` reads 90% all along."""
    end = end or utcnow()
    with write_session(s) as sess:
        held = sess.execute(select(GPUAllocation.host_id, GPUAllocation.gpu_index).where(
            GPUAllocation.training_id == tid, GPUAllocation.released_at.is_(None))).all()
        for k, util in enumerate(utilizations):
            at = end - timedelta(seconds=every_s * (len(utilizations) - 1 - k))
            for host_id, index in held:
                sess.add(GPUMetricsHistory(timestamp=at, host_id=host_id, gpu_index=index,
                                           utilization=90 if index == busy_gpu else util,
                                           memory_used=2**30, memory_total=80 * 2**30))


def began_long_ago(s, tid, seconds):
    from gpufleet.db.models import TrainingEvent
    from sqlalchemy import update

    with write_session(s) as sess:
        sess.execute(update(TrainingEvent).where(TrainingEvent.training_id == tid)
                     .values(time=utcnow() - timedelta(seconds=seconds)))


@BOTH
def test_idle_gpus_are_tracked_warned_once_and_cleared_when_busy_again(sim_host):
    s = settings_for(sim_host("nvlink-all", "2xH100-80GB"), "warn")
    tid = start(s, "notebook", gpus=2, preemptible=False)
    began_long_ago(s, tid, 3600)
    # Busy until 5 minutes ago, idle since: tracked, not yet past the 10-minute window.
    history(s, tid, [90, 90, 90, 90, 90, 1, 1, 1, 1, 1], end=utcnow())
    assert idle.watch(s, s, s) == []
    t = row(s, tid)
    assert t.idle_since is not None and t.idle_warned_at is None
    # Idle past the window: one warning, the training keeps its GPUs (policy warn).
    later = utcnow() + timedelta(minutes=6)
    history(s, tid, [2, 2, 2, 2, 2, 2], end=later)
    assert idle.watch(s, s, s, now=later) == [(tid, "warned")]
    assert idle.watch(s, s, s, now=later) == []
    t = row(s, tid)
    assert t.idle_warned_at is not None and not t.reclaim_requested and t.status == "running"
    warnings = [r for k, _, r in kinds(s, tid) if k == "warning"]
    assert len(warnings) == 1 and "below 5% utilisation" in warnings[0] and "idle_action: warn" in warnings[0]
    # Busy again: the badge goes.
    again = later + timedelta(minutes=1)
    history(s, tid, [80], end=again)
    assert idle.watch(s, s, s, now=again) == [(tid, "busy")]
    t = row(s, tid)
    assert t.idle_since is None and t.idle_warned_at is None
    assert any(r == "its GPUs are busy again" for _, _, r in kinds(s, tid))


@BOTH
def test_the_stop_policy_asks_for_a_reclaim_and_one_busy_gpu_keeps_it(sim_host):
    s = settings_for(sim_host("nvlink-all", "2xH100-80GB"), "stop")
    tid = start(s, "notebook", gpus=2, preemptible=False)
    began_long_ago(s, tid, 3600)
    history(s, tid, [1] * 12)
    assert idle.watch(s, s, s) == [(tid, "reclaim")]
    t = row(s, tid)
    assert t.reclaim_requested and t.idle_warned_at is not None
    assert any(k == "warning" and "reclaiming them" in r for k, _, r in kinds(s, tid))



@BOTH
def test_one_busy_gpu_keeps_a_training_from_being_called_idle(sim_host):
    s = settings_for(sim_host("nvlink-all", "2xH100-80GB"), "stop")
    tid = start(s, "half-busy", gpus=2, preemptible=False)
    began_long_ago(s, tid, 3600)
    busy = row(s, tid).gpu_ids[1]
    history(s, tid, [1] * 12, busy_gpu=busy)
    assert idle.watch(s, s, s) == []
    t = row(s, tid)
    assert t.idle_since is None and not t.reclaim_requested


@BOTH
def test_no_fresh_samples_means_no_verdict(sim_host):
    s = settings_for(sim_host("nvlink-all", "1xH100-80GB"), "stop")
    tid = start(s, "quiet", preemptible=False)
    began_long_ago(s, tid, 3600)
    # The agent stopped writing ten minutes ago: its last samples say nothing about now.
    history(s, tid, [0] * 20, end=utcnow() - timedelta(minutes=10))
    assert idle.watch(s, s, s) == []
    assert row(s, tid).idle_since is None and not row(s, tid).reclaim_requested
    assert idle.watch(s.model_copy(update={"idle_action": "off"}), s, s) == []


@BOTH
def test_a_just_ended_trainings_busy_samples_are_not_someone_elses_load(sim_host):
    """A sweep's trial ends and releases its GPU: the busy samples it left in the history were this
    server's own load (their job_id says so), so the GPU is free, not foreign-busy; the same samples
    with no gpufleet process on the GPU are someone else's."""
    from gpufleet.db.models import GPU, Host
    from gpufleet.db.session import session_scope
    from gpufleet.scheduling.availability import assess_gpu
    from gpufleet.scheduling.inputs import gather_observations, policy_from_settings

    s = sim_host("nvlink-all", "2xH100-80GB")
    policy = policy_from_settings(s, s)
    now = utcnow()
    with write_session(s) as sess:
        host_id = sess.scalar(select(Host.id).where(Host.name == s.host_name))
        trial = __import__("uuid").uuid4()
        for k in range(policy.sustained_samples):
            at = now - timedelta(seconds=s.sample_interval_s * k)
            sess.add(GPUMetricsHistory(timestamp=at, host_id=host_id, gpu_index=0, utilization=93, memory_used=2**30,
                                       memory_total=80 * 2**30, job_id=trial, job_type="training"))
            sess.add(GPUMetricsHistory(timestamp=at, host_id=host_id, gpu_index=1, utilization=93, memory_used=2**30,
                                       memory_total=80 * 2**30))
        assert sess.scalar(select(GPU.id).where(GPU.host_id == host_id, GPU.index == 1))
    with session_scope(s) as sess:
        obs, _ = gather_observations(sess, s, s, host=s.host_name, policy=policy)
    states = {o.index: assess_gpu(o, policy) for o in obs}
    assert states[0].state == "free", states[0].reason
    assert states[1].state == "foreign-busy" and "someone else" in states[1].reason
