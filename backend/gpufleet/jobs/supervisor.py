"""Running one attempt of a training: claim, launch, supervise, end.

The Celery task calls :func:`run_attempt`. The launcher runs as a subprocess
in its own session (process group), never through ``mp.spawn`` inside the
Celery process: pool children are daemonic and may not have children, and a
process group lets cancel kill every rank with one signal.

The launcher is tied to this worker by a pipe (``--parent-fd``): if the
worker dies, even by SIGKILL, the launcher and its ranks exit at once. Every
write of an attempt names its attempt number, so an attempt whose lease ran
out writes nothing once a newer one has started (checkpoints are fenced the
same way, by ``<checkpoint_dir>/fence.json``).

Once launched, an attempt is watched by :class:`gpufleet.jobs.watch.AttemptWatch`
(progress, stops, cancel, hang, lease); what it saw decides the outcome here.
When the worker is asked to stop (SIGTERM, SIGINT: :func:`begin_shutdown`)
each running training is asked to checkpoint, given up to
``settings.stop_grace_s``, and put back in the queue as ``interrupted``
(not a failure, no restart used).
"""

from __future__ import annotations

import subprocess
import time
import uuid
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import DBAPIError

from gpufleet import memberfs
from gpufleet.config import Settings, StoreSettings, WorkerSettings
from gpufleet.db.models import GPU, GPUAllocation, Training
from gpufleet.db.session import session_scope, write_session
from gpufleet.db.types import utcnow
from gpufleet.devices.backend import DeviceBackend, device_backend
from gpufleet.jobs import checkpoint_found, ckpt_restore, ckpt_uploads, gang_member, rendezvous, stops
from gpufleet.jobs.kinds import AttemptStart, Plan, checkpoint_dir, retries_of, run_dir, sandbox_for, work_kind
from gpufleet.jobs.launch_config import seed_clone
from gpufleet.jobs.launcher import launch
from gpufleet.jobs.log_shipper import ShippedLog
from gpufleet.jobs.logs import BoundedLog
from gpufleet.jobs.metrics_sink import MetricsSink
from gpufleet.jobs.watch import AttemptWatch, attempt_fence, begin_shutdown, stopping
from gpufleet.lifecycle import outcome
from gpufleet.lifecycle.transitions import get_training, transition
from gpufleet.engine import exitcodes
from gpufleet.engine.fence import write_fence

# Where the worker's signal handler and the row's writers find them.
# How long a worker whose ranks an outage stopped waits for the database to come back and say so.
OUTAGE_WAIT_S = 3600.0

__all__ = ["attempt_fence", "begin_shutdown", "checkpoint_dir", "run_attempt", "run_dir"]


def _claim(store_settings: StoreSettings, worker_settings: WorkerSettings, tid: uuid.UUID, host_id: uuid.UUID,
           host_name: str, worker_id: str) -> Training | None:
    """scheduled -> running for this host, or None (redelivery, cancel, other host)."""
    with write_session(store_settings) as sess:
        t = get_training(sess, tid)
        if t is None or t.status != "scheduled" or t.host_id != host_id:
            return None
        now = utcnow()
        ok = transition(
            sess, tid, ["scheduled"], "running",
            reason=f"running on host {host_name} (attempt {t.attempt + 1})",
            data={"host": host_name, "worker": worker_id, "attempt": t.attempt + 1},
            extra_where=[Training.host_id == host_id, Training.cancel_requested.is_(False)],
            lease_owner=worker_id,
            lease_expires_at=now + timedelta(seconds=worker_settings.lease_s),
            attempt=Training.attempt + 1,
            started_at=func.coalesce(Training.started_at, now),
            exit_code=None,
        )
        if not ok:
            return None
        return get_training(sess, tid)


def _devices(settings: StoreSettings, t: Training) -> list[str]:
    with session_scope(settings) as sess:
        gpus = {
            g.index: g
            for g in sess.execute(
                select(GPU).join(GPUAllocation, GPUAllocation.gpu_id == GPU.id).where(
                    GPUAllocation.training_id == t.id, GPUAllocation.released_at.is_(None),
                    GPUAllocation.host_id == t.host_id,  # a training across hosts has GPUs elsewhere too
                )
            ).scalars()
        }
    order = t.gpu_ids or sorted(gpus)
    return [f"{gpus[i].backend}:{gpus[i].backend_device_id}" for i in order]


def run_attempt(settings: Settings, tid: uuid.UUID, host_id: uuid.UUID, host_name: str, worker_id: str) -> str:
    """Run one attempt of training ``tid`` on this host; returns what happened."""
    if gang_member.is_follower(settings, tid, host_id):  # other ranks of a training across hosts
        return _follow(settings, tid, host_id, host_name, worker_id)
    claimed_at = time.monotonic()
    t = _claim(settings, settings, tid, host_id, host_name, worker_id)
    if t is None:
        return "skipped"
    backend = device_backend(settings)
    logf = ShippedLog(settings, tid)
    logf.line(f"[gpufleet] attempt {t.attempt} on host {host_name} by {worker_id}")
    try:
        plan = _prepare(settings, t, worker_id, backend, logf)
    except Exception as exc:  # noqa: BLE001 - a bad row must end as failed, not hang as running
        return _fail_before_launch(settings, t, worker_id, logf, f"cannot prepare the launch: {exc}")
    sink = _open_sink(settings, t, worker_id, host_name, plan, claimed_at)
    earlier = [p for p in _progress_files(run_dir(settings, tid)) if p != plan.progress_path]
    ckpt_dir = checkpoint_dir(settings, tid)
    ckpt_mark = checkpoint_found.mark(ckpt_dir)
    try:
        proc, lifeline = _start(settings, t, plan, sink, earlier, logf)
    except OSError as exc:
        return _fail_before_launch(settings, t, worker_id, logf, f"cannot start the launcher: {exc}")
    watch = AttemptWatch(settings, t, host_name, worker_id, backend, logf, sink, proc, lifeline,
                         plan.progress_path, claimed_at, plan.gang, ckpt_dir=ckpt_dir, ckpt_mark=ckpt_mark)
    code = watch.run()
    if watch.outage_s is not None:
        return _end_after_outage(settings, settings, t, worker_id, watch, code)
    if watch.lost:
        return "lost"
    decision = _decide(settings, t, watch, code) if watch.sink_failure is None else _sink_failed(t, watch)
    _finish(settings, t, worker_id, decision, code, watch.stop.preempted_by if watch.stop else None)
    if decision.status != "queued":
        work_kind(t.kind).ended(settings, tid)
    return decision.status


def _progress_files(rdir: Path) -> list[Path]:
    """The earlier attempts' progress files in the run dir, the training's account's (gpufleet.memberfs)."""
    try:
        folder = memberfs.Dir.root(rdir)  # its own name is in the data dir's jobs/
    except OSError:
        return []
    with folder:
        return [rdir / n for n in sorted(folder.names()) if n.startswith("progress-") and n.endswith(".jsonl")]


def _follow(settings: Settings, tid: uuid.UUID, host_id: uuid.UUID, host_name: str, worker_id: str) -> str:
    """Run this host's ranks of a training across hosts whose rank 0 is elsewhere."""
    iso = sandbox_for(settings, tid)
    return gang_member.run_follower(settings, tid, host_id, host_name, worker_id, partial(launch, isolation=iso),
                                   run_dir(settings, tid), checkpoint_dir(settings, tid), stopping)


def _prepare(settings: Settings, t: Training, worker_id: str, backend: DeviceBackend, logf: BoundedLog) -> Plan:
    """The devices, the sandbox and the spec file of this attempt, as its kind writes them."""
    devices = _devices(settings, t)
    seed_clone(settings, t, checkpoint_dir(settings, t.id), logf)
    ckpt_restore.restore(settings, t, checkpoint_dir(settings, t.id), logf)  # the store's, if newer than the host's
    # GPUs that cannot run kernels (a simulated fleet's) have their ranks run on the CPU.
    start = AttemptStart(settings, t, worker_id, devices, backend.ranks_run_on_cpu(devices))
    return work_kind(t.kind).prepare(start, sandbox_for(settings, t.id))


def _fail_before_launch(settings: StoreSettings, t: Training, worker_id: str, logf: BoundedLog, reason: str) -> str:
    logf.line(f"[gpufleet] {reason}")
    logf.close()
    _finish(settings, t, worker_id, outcome.Decision("failed", reason), None)
    return "failed"


def _open_sink(settings: Settings, t: Training, worker_id: str, host_name: str, plan: Plan,
               claimed_at: float) -> MetricsSink:
    sink = MetricsSink(settings, t, worker_id, plan.progress_path, host_name)
    sink.on_checkpoint = ckpt_uploads.on_checkpoint(t.id, checkpoint_dir(settings, t.id), t.attempt, host_name)
    sink.renewed_at = claimed_at
    if plan.gang:
        sink.rank_hosts = rendezvous.rank_hosts_of(settings, t.id)
    return sink


def _start(settings: Settings, t: Training, plan: Plan, sink: MetricsSink, earlier: list[Path],
           logf: BoundedLog) -> tuple[subprocess.Popen, int]:
    """Fence older attempts off the checkpoints, then start the launcher (raises OSError when it cannot)."""
    # From here on a launcher of an older attempt may not put a checkpoint in place.
    write_fence(checkpoint_dir(settings, t.id), t.attempt)
    return work_kind(t.kind).start(settings, t, plan, sink, earlier, logf)


def _decide(settings: StoreSettings, t: Training, watch: AttemptWatch, code: int) -> outcome.Decision:
    """What the exit code, the errors the ranks reported, a cancel, a lost host or a stop make of the attempt."""
    sink = watch.sink
    with session_scope(settings) as sess:
        fresh = get_training(sess, t.id)
    decision = outcome.decide(outcome.Attempt(
        exit_code=code,
        cancel_requested=watch.cancelled or bool(fresh and fresh.cancel_requested),
        restarts=t.restarts,
        max_restarts=t.max_restarts,
        allow_rebalance=t.allow_rebalance,
        already_rebalanced=retries_of(settings, t.id, "oom_rebalance") > 0,
        config=dict(t.config),
        world_size=t.world_size,
        error=sink.last_error,
        oom_refusal=work_kind(t.kind).oom_refusal,
        cancel_as=(fresh.cancel_as if fresh else None) or "cancelled",
    ))
    verdict = watch.verdict
    if watch.leader is not None and verdict is None and code not in (0, exitcodes.BAD_DATA, exitcodes.INTERRUPTED) \
            and decision.status in ("queued", "failed"):
        # A member that joined late, when the ranks timed out waiting; else the host whose ranks failed first,
        # named; else a member that never joined because its worker is gone.
        late = watch.leader.late() if code == exitcodes.COLLECTIVE_TIMEOUT else None
        verdict = late or rendezvous.root_cause(watch.leader) or watch.leader.absent()
    if verdict is not None and decision.status not in ("succeeded", "cancelled", "pruned"):
        decision = rendezvous.gang_decision(verdict, t)
    if watch.stop is not None:
        decision = stops.decide(watch.stop, decision, stopping=stopping(), step=sink.last_checkpoint_step(),
                                host_name=watch.host_name, max_runtime_s=t.max_runtime_s,
                                checkpointed=sink.checkpoints > watch.stop.checkpoints_before,
                                path=sink.checkpoint_path)
    if watch.checkpoints_before_cancel is not None and decision.status == "cancelled":
        decision = stops.cancelled(decision, step=sink.last_checkpoint_step(), path=sink.checkpoint_path,
                                   checkpointed=sink.checkpoints > watch.checkpoints_before_cancel)
    return decision


def _sink_failed(t: Training, watch: AttemptWatch) -> outcome.Decision:
    """The worker stopped the ranks because it could not record their progress: the worker's fault, named,
    and a restart (from the newest checkpoint) while the training has restarts left."""
    why = f"the worker on host {watch.host_name} could not record the training's progress ({watch.sink_failure})"
    if t.restarts < t.max_restarts:
        return outcome.Decision("queued", f"{why}; restarting from the newest checkpoint", retry_kind="failure",
                                counts_restart=True)
    return outcome.Decision("failed", f"{why}, and no restarts are left (max_restarts {t.max_restarts})")


def _end_after_outage(store_settings: StoreSettings, worker_settings: WorkerSettings, t: Training, worker_id: str,
                      watch: AttemptWatch, code: int) -> str:
    """Requeue an attempt whose ranks were stopped because the database stayed away past the outage grace.

    Once the database is back: its judge counted none of the outage against
    the lease (gpufleet.jobs.reach), so this worker still holds it and says
    what happened. Not a restart: nothing was wrong with the training.
    """
    reason = (f"the database could not be reached for {watch.outage_s:.0f}s, longer than GPUFLEET_DB_OUTAGE_GRACE_S "
              f"({worker_settings.db_outage_grace_s:.0f}s): the worker on host {watch.host_name} stopped the ranks so "
              "that no other attempt runs beside them; requeued to resume from the newest checkpoint (not counted as a "
              "restart)")
    give_up = time.monotonic() + OUTAGE_WAIT_S
    while True:
        try:
            if watch.sink.pump(final=True) == "lost":
                return "lost"
            _finish(store_settings, t, worker_id, outcome.Decision("queued", reason, retry_kind="db_outage"), code)
            return "queued"
        except DBAPIError:
            if time.monotonic() > give_up:
                return "lost"  # its judge ends it, naming the time it could not reach the database either
            time.sleep(1.0)


def _finish(settings: StoreSettings, t: Training, worker_id: str, d: outcome.Decision, code: int | None,
            preempted_by: uuid.UUID | None = None) -> None:
    """Write the end of the attempt; the reservation ends in the same transaction (a preempted
    training keeps it for its preemptor: gpufleet.scheduling.preemption)."""
    with write_session(settings) as sess:
        mine = [Training.lease_owner == worker_id, Training.attempt == t.attempt]
        if d.status == "preempted":
            transition(sess, t.id, ["running"], "preempted", reason=d.reason, extra_where=mine, exit_code=code,
                       data={"exit_code": code, "preempted_by": str(preempted_by)}, preempted_by=preempted_by,
                       lease_owner=None, lease_expires_at=None, launcher_pid=None)
            return
        if d.status != "queued":
            transition(sess, t.id, ["running"], d.status, reason=d.reason, extra_where=mine,
                       exit_code=code, cancel_requested=False, data={"exit_code": code})
            return
        values: dict[str, Any] = {
            "exit_code": code,
            "lease_owner": None,
            "lease_expires_at": None,
            "not_before": utcnow() + timedelta(seconds=d.backoff_s) if d.backoff_s else None,
        }
        if d.counts_restart:
            values["restarts"] = Training.restarts + 1
        if d.config is not None:
            values["config"] = d.config
        values.update(d.row or {})
        if t.auto_select:
            # The server chose the GPUs; it may choose others for the retry.
            values.update(gpu_ids=None, host_id=None)
        transition(sess, t.id, ["running"], "queued", reason=d.reason, kind="retry", extra_where=mine,
                   data={"retry_kind": d.retry_kind, "exit_code": code, "backoff_s": d.backoff_s}, **values)
