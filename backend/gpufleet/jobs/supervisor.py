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

When the worker is asked to stop (SIGTERM, SIGINT: :func:`begin_shutdown`)
each running training is asked to checkpoint, given up to
``settings.stop_grace_s``, and put back in the queue as ``interrupted``
(not a failure, no restart used).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import uuid
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.exc import DBAPIError

from gpufleet.config import Settings
from gpufleet.db.models import GPU, GPUAllocation, Training, TrainingEvent
from gpufleet.db.session import session_scope, write_session
from gpufleet.db.types import utcnow
from gpufleet.devices.backend import device_backend
from gpufleet.jobs import isolation, procs, rendezvous, script_attempt, stops
from gpufleet.jobs.launch_config import launch_config, seed_clone
from gpufleet.jobs.launcher import launch
from gpufleet.jobs.log_shipper import ShippedLog
from gpufleet.jobs.metrics_sink import MetricsSink
from gpufleet.training import exitcodes
from gpufleet.training.fence import write_fence
from gpufleet.trainings import outcome
from gpufleet.trainings.lifecycle import get_training, transition

log = logging.getLogger(__name__)

# Reading the progress file is cheap; the database is written about once a second.
POLL_S = 0.1
# SIGTERM first so rank 0 may checkpoint; the group is killed after this.
CANCEL_GRACE_S = 2.0
# An attempt kills its own processes this long before the lease it last
# renewed runs out, and recovery elsewhere waits this long past the end
# (jobs/recovery.py): two attempts of one training never run at once, even
# while this worker cannot reach the database or is too loaded to renew.
FENCE_MARGIN_S = 1.0

# Set when this worker is stopping: every supervised training checkpoints and goes back to the queue.
_STOPPING = threading.Event()


def begin_shutdown() -> None:
    """Ask every training this process supervises to checkpoint and stop (idempotent)."""
    _STOPPING.set()


def checkpoint_dir(settings: Settings, training_id: uuid.UUID) -> Path:
    return Path(settings.checkpoint_root) / str(training_id)  # type: ignore[arg-type]


def run_dir(settings: Settings, training_id: uuid.UUID) -> Path:
    return settings.data_dir / "jobs" / str(training_id)


def _claim(settings: Settings, tid: uuid.UUID, host_id: uuid.UUID, host_name: str, worker_id: str) -> Training | None:
    """scheduled -> running for this host, or None (redelivery, cancel, other host)."""
    with write_session(settings) as sess:
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
            lease_expires_at=now + timedelta(seconds=settings.lease_s),
            attempt=Training.attempt + 1,
            started_at=func.coalesce(Training.started_at, now),
            exit_code=None,
        )
        if not ok:
            return None
        return get_training(sess, tid)


def _devices(settings: Settings, t: Training) -> list[str]:
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


def _retries_of(settings: Settings, tid: uuid.UUID, kind: str) -> int:
    with session_scope(settings) as sess:
        rows = sess.execute(
            select(TrainingEvent.data).where(TrainingEvent.training_id == tid, TrainingEvent.kind == "retry")
        ).scalars()
        return sum(1 for d in rows if d and d.get("retry_kind") == kind)


def _write_spec(settings: Settings, t: Training, devices: list[str], on_cpu: bool,
                gang: dict | None = None) -> tuple[Path, Path]:
    from gpufleet.training.spec import LaunchSpec

    rdir = run_dir(settings, t.id)
    rdir.mkdir(parents=True, exist_ok=True)
    progress = rdir / f"progress-{t.attempt}.jsonl"
    progress.unlink(missing_ok=True)
    timeouts = _retries_of(settings, t.id, "timeout")
    spec = LaunchSpec(
        recipe=t.recipe,
        config=launch_config(settings, t),  # the row's config, with first shares for proportional
        devices=devices,
        checkpoint_dir=str(checkpoint_dir(settings, t.id)),
        progress_file=str(progress),
        data_root=str(settings.data_root),
        resume=True,
        # Each collective-timeout retry doubles the timeout (the seed's table).
        collective_timeout_s=settings.collective_timeout_s * 2**timeouts,
        training_id=str(t.id),
        simulated=on_cpu,
        # A cancel kills the group after CANCEL_GRACE_S anyway; a stopping
        # worker gives its ranks the whole grace to checkpoint.
        stop_grace_s=settings.stop_grace_s,
        attempt=t.attempt,
        gang=gang,
    )
    path = rdir / f"spec-{t.attempt}.json"
    spec.write(path)
    return path, progress


def _fence(sink: MetricsSink, pgid: int, lease_s: float, done: threading.Event, fenced: threading.Event) -> None:
    """Kill the attempt's process group before its lease can run out unrenewed.

    A thread of its own: the loop that renews may itself be stuck in a
    database call. Renewals that land in time push the deadline on.
    """
    while not done.wait(POLL_S):
        if time.monotonic() > sink.renewed_at + lease_s - FENCE_MARGIN_S:
            fenced.set()
            procs.signal_group(pgid, signal.SIGKILL)
            return


def run_attempt(settings: Settings, tid: uuid.UUID, host_id: uuid.UUID, host_name: str, worker_id: str) -> str:
    """Run one attempt of training ``tid`` on this host; returns what happened."""
    if rendezvous.is_follower(settings, tid, host_id):  # other ranks of a training across hosts
        iso = isolation.for_training(settings, tid, run_dir(settings, tid), checkpoint_dir(settings, tid))
        return rendezvous.run_follower(settings, tid, host_id, host_name, worker_id, partial(launch, isolation=iso),
                                       run_dir(settings, tid), checkpoint_dir(settings, tid), _STOPPING.is_set)
    claimed_at = time.monotonic()
    t = _claim(settings, tid, host_id, host_name, worker_id)
    if t is None:
        return "skipped"
    backend = device_backend(settings)
    logf = ShippedLog(settings, tid)
    logf.line(f"[gpufleet] attempt {t.attempt} on host {host_name} by {worker_id}")
    gang: dict | None = None
    try:
        devices = _devices(settings, t)
        # GPUs that cannot run kernels (a simulated fleet's) have their ranks run on the CPU.
        on_cpu = backend.ranks_run_on_cpu(devices)
        seed_clone(settings, t, checkpoint_dir(settings, tid), logf)
        iso = isolation.for_training(settings, tid, run_dir(settings, tid), checkpoint_dir(settings, tid),
                                     script_attempt.work_dir(settings, tid) if t.kind == "script" else None)
        if t.kind == "script":  # GPUFLEET_OUTPUT_DIR is the training's too, made and given to its account
            iso.write.append(script_attempt.output_dir(settings, tid))
        if t.kind == "script":
            spec_path, progress_path = script_attempt.write_spec(
                settings, t, devices, on_cpu, run_dir(settings, tid), checkpoint_dir(settings, tid),
                settings.stop_grace_s)
        else:
            gang = rendezvous.leader_prepare(settings, t, worker_id)
            spec_path, progress_path = _write_spec(settings, t, devices, on_cpu, gang)
    except Exception as exc:  # noqa: BLE001 - a bad row must end as failed, not hang as running
        logf.line(f"[gpufleet] cannot prepare the launch: {exc}")
        logf.close()
        _finish(settings, t, worker_id, outcome.Decision("failed", f"cannot prepare the launch: {exc}"), None)
        return "failed"
    sink = MetricsSink(settings, t, worker_id, progress_path, host_name)
    sink.renewed_at = claimed_at
    if gang:
        sink.rank_hosts = rendezvous.rank_hosts_of(settings, tid)
    earlier = [p for p in sorted(run_dir(settings, tid).glob("progress-*.jsonl")) if p != progress_path]
    try:
        # From here on a launcher of an older attempt may not put a checkpoint in place.
        write_fence(checkpoint_dir(settings, tid), t.attempt)
        if t.kind == "script":
            sink.fill_from_earlier(earlier)
            proc, lifeline = launch(spec_path, logf, tid, script_attempt.MODULE, script_attempt.launch_env(tid), iso)
        else:
            sink.trim_after_resume(checkpoint_dir(settings, tid), earlier)
            proc, lifeline = launch(spec_path, logf, tid, env=rendezvous.launch_env(settings, tid) if gang else None,
                                    isolation=iso)
    except OSError as exc:
        logf.line(f"[gpufleet] cannot start the launcher: {exc}")
        logf.close()
        _finish(settings, t, worker_id, outcome.Decision("failed", f"cannot start the launcher: {exc}"), None)
        return "failed"
    pgid = proc.pid  # start_new_session: the launcher leads its own group
    procs.write_pidfile(settings, host_name, tid, pgid, worker_id)
    backend.training_started(t.gpu_ids or [], proc.pid, str(t.id), t.memory_estimate)
    sink.memory.watch_processes(backend.nvml, t.gpu_ids or [], proc.pid)
    with write_session(settings) as sess:
        sess.execute(update(Training).where(*attempt_fence(t, worker_id)).values(launcher_pid=proc.pid)
                     .execution_options(synchronize_session=False))
    cancelled = lost = False
    stop: stops.Stop | None = None

    def ask_to_stop(state: str) -> stops.Stop | None:
        if stop is not None or cancelled:
            return stop
        asked = stops.requested(stopping=_STOPPING.is_set(), state=state, preempted_by=sink.preempted_by,
                                max_runtime_s=t.max_runtime_s, running_s=time.monotonic() - claimed_at,
                                grace_s=settings.stop_grace_s)
        if asked is not None:
            asked.checkpoints_before = sink.checkpoints
            logf.line(f"[gpufleet] {asked.note}")
            if t.kind == "script":
                script_attempt.mark_stop(progress_path)  # the marker first, then the signal the ranks get
            procs.signal_group(pgid, signal.SIGTERM)
        return asked

    watch = rendezvous.LeaderWatch(settings, t) if gang else None
    verdict: rendezvous.Verdict | None = None
    done, fenced = threading.Event(), threading.Event()
    threading.Thread(target=_fence, args=(sink, pgid, settings.lease_s, done, fenced),
                     name=f"gpufleet-fence-{tid}", daemon=True).start()
    try:
        while proc.poll() is None:
            time.sleep(POLL_S)
            if fenced.is_set():
                break
            stop = ask_to_stop("ok")  # before the database: a worker's stop works while it is away
            if stop is not None and time.monotonic() > stop.deadline:
                logf.line("[gpufleet] the training did not stop within the grace; killing it")
                procs.stop_group(pgid, 0.0)
            try:
                state = sink.pump()
                if watch is not None and verdict is None and (verdict := watch.check()) is not None:
                    logf.line(f"[gpufleet] {verdict.reason}; stopping the ranks on every host")
                    procs.stop_group(pgid, CANCEL_GRACE_S)
            except DBAPIError as exc:
                # A database blip must not kill a training; the lines wait in
                # the sink. One that outlasts the lease ends in the fence thread.
                log.warning("training %s: cannot reach the database (%s); retrying", tid, exc.orig)
                continue
            if state == "lost":
                lost = True
                logf.line("[gpufleet] the lease on this training was lost; stopping it here")
                procs.stop_group(pgid, CANCEL_GRACE_S)
                break
            stop = ask_to_stop(state)
            if state == "cancel" and not cancelled:
                cancelled = True
                logf.line("[gpufleet] cancel requested; stopping every rank")
                procs.stop_group(pgid, CANCEL_GRACE_S)
            if sink.hung():
                logf.line(f"[gpufleet] no progress for {sink.hang_after_s:.0f}s; killing the training")
                sink.note_error({"rank": None, "kind": "timeout",
                                 "message": f"no progress for {sink.hang_after_s:.0f}s (hung collective?)"})
                procs.stop_group(pgid, CANCEL_GRACE_S)
                sink.force_exit_code(13)
        if fenced.is_set() and not lost:
            lost = True
            logf.line("[gpufleet] the lease ran out before this worker could renew it; the training was "
                      "stopped here so that no other attempt runs beside it")
    finally:
        done.set()
        procs.stop_group(pgid, 0.0)  # leftover ranks of a launcher that died first
        code = proc.wait()
        os.close(lifeline)
        backend.training_ended(proc.pid)
        procs.remove_pidfile(settings, host_name, tid)
        try:
            sink.pump(final=True)
        except DBAPIError:
            log.warning("training %s: the last progress could not be written", tid, exc_info=True)
        logf.line(f"[gpufleet] launcher exited with {code}")
        logf.close()
    if lost:
        return "lost"
    code = sink.forced_exit_code if sink.forced_exit_code is not None else code
    with session_scope(settings) as sess:
        fresh = get_training(sess, tid)
    attempt = outcome.Attempt(
        exit_code=code,
        cancel_requested=cancelled or bool(fresh and fresh.cancel_requested),
        restarts=t.restarts,
        max_restarts=t.max_restarts,
        allow_rebalance=t.allow_rebalance,
        already_rebalanced=_retries_of(settings, tid, "oom_rebalance") > 0,
        config=dict(t.config),
        world_size=t.world_size,
        error=sink.last_error,
        kind=t.kind,
    )
    decision = outcome.decide(attempt)
    if watch is not None and verdict is None and code not in (0, exitcodes.BAD_DATA, exitcodes.INTERRUPTED) \
            and decision.status in ("queued", "failed"):
        verdict = rendezvous.root_cause(watch)  # the host whose ranks failed first, named
    if verdict is not None and decision.status not in ("succeeded", "cancelled"):
        decision = rendezvous.gang_decision(verdict, t)
    if stop is not None:
        decision = stops.decide(stop, decision, stopping=_STOPPING.is_set(), step=sink.last_checkpoint_step(),
                                host_name=host_name, max_runtime_s=t.max_runtime_s,
                                checkpointed=sink.checkpoints > stop.checkpoints_before)
    _finish(settings, t, worker_id, decision, code, stop.preempted_by if stop else None)
    if t.kind == "script" and decision.status != "queued":
        script_attempt.cleanup(settings, tid)
    return decision.status


def attempt_fence(t: Training, worker_id: str) -> list[Any]:
    """The WHERE that lets only this attempt, while it holds the lease, write the row."""
    return [Training.id == t.id, Training.status == "running", Training.lease_owner == worker_id,
            Training.attempt == t.attempt]


def _finish(settings: Settings, t: Training, worker_id: str, d: outcome.Decision, code: int | None,
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
        if t.auto_select:
            # The server chose the GPUs; it may choose others for the retry.
            values.update(gpu_ids=None, host_id=None)
        transition(sess, t.id, ["running"], "queued", reason=d.reason, kind="retry", extra_where=mine,
                   data={"retry_kind": d.retry_kind, "exit_code": code, "backoff_s": d.backoff_s}, **values)
