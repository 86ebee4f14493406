"""Slurm's word on each pool job, carried into its training: status, wait reason, progress, log, end.

One pass (:func:`poll`) asks ``squeue`` about every live job at once, then per job:
pending keeps the training queued with Slurm's reason in words; running moves
it to ``running`` on the job's nodes and pumps the ranks' progress lines
(the same :class:`~gpufleet.jobs.metrics_sink.MetricsSink` a team host's
supervisor uses); an end writes the status from Slurm's state and exit code.
A cancel in gpufleet becomes ``scancel --signal=TERM`` (the ranks checkpoint
and stop), then ``scancel`` after the stop grace; a job cancelled outside
gpufleet ends its training ``cancelled`` with that reason.
"""

from __future__ import annotations

import logging
import time
import uuid
from datetime import timedelta

from sqlalchemy import select, update

from gpufleet import memberfs
from gpufleet.config import Settings
from gpufleet.db.pools import Pool, PoolJob
from gpufleet.db.session import session_scope, write_session
from gpufleet.db.types import utcnow
from gpufleet.jobs.log_shipper import flush
from gpufleet.jobs.logs import BoundedLog, log_path
from gpufleet.jobs.metrics_sink import MetricsSink
from gpufleet.lifecycle.models import Training
from gpufleet.lifecycle.transitions import record_event, transition
from gpufleet.pools import slurm
from gpufleet.pools.submit import on_pool, progress_file

log = logging.getLogger(__name__)

ACTIVE = ("queued", "scheduled", "running")
RUNNING_STATES = ("RUNNING", "COMPLETING", "CONFIGURING", "STAGE_OUT", "SIGNALING")
FAILED_STATES = ("FAILED", "NODE_FAIL", "BOOT_FAIL", "OUT_OF_MEMORY", "DEADLINE", "TIMEOUT")
REQUEUED_STATES = ("PREEMPTED", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD")
# In this process: each running job's progress reader, and when a cancel's TERM was sent.
_SINKS: dict[tuple[uuid.UUID, int], MetricsSink] = {}
_SIGNALLED: dict[str, float] = {}


def _live_jobs(settings: Settings) -> list[tuple[PoolJob, Training, Pool]]:
    with session_scope(settings) as sess:
        rows = sess.execute(
            select(PoolJob, Training, Pool).join(Training, Training.id == PoolJob.training_id)
            .join(Pool, Pool.id == PoolJob.pool_id).where(PoolJob.ended_at.is_(None))).all()
        sess.expunge_all()
        return [tuple(r) for r in rows]  # type: ignore[misc]


def poll(settings: Settings) -> int:
    """One pass over the live pool jobs; returns how many there were."""
    if time.monotonic() - _ACCOUNTED[0] >= ACCOUNT_EVERY_S:
        _ACCOUNTED[0] = time.monotonic()
        try:
            account(settings)
        except slurm.SlurmError as exc:
            log.warning("could not read Slurm's accounting: %s", exc)
    live = _live_jobs(settings)
    if not live:
        return 0
    states = slurm.jobs([job.job_id for job, _, _ in live])
    for job, t, pool in live:
        state = states.get(job.job_id) or slurm.accounted(job.job_id)
        try:
            _one(settings, job, t, pool, state)
        except Exception:  # one job's trouble must not stop the others' updates
            log.exception("pool job %s of training %s", job.job_id, t.id)
    return len(live)


def _one(settings: Settings, job: PoolJob, t: Training, pool: Pool, state: slurm.JobState | None) -> None:
    if t.attempt != job.attempt or t.status not in ACTIVE or t.cancel_requested:
        _stop(settings, job, t, pool, state)
    if state is None:
        _end(settings, job, t, "failed", f"Slurm no longer knows job {job.job_id} (it ended with no record: is "
                                         "accounting, sacct, configured?)", None)
        return
    _ship_output(settings, job, pool)
    if state.state == "PENDING":
        _pending(settings, job, t, state)
    elif state.state in RUNNING_STATES:
        _running(settings, job, t, pool, state)
    else:
        _finished(settings, job, t, pool, state)


def _stop(settings: Settings, job: PoolJob, t: Training, pool: Pool, state: slurm.JobState | None) -> None:
    """A cancel asked in gpufleet (or an attempt superseded): TERM first, the kill after the grace."""
    if state is None or state.state not in ("PENDING", *RUNNING_STATES):
        return
    first = _SIGNALLED.get(job.job_id)
    try:
        if state.state == "PENDING":
            slurm.cancel(job.job_id, account=job.account)
        elif first is None:
            on_pool(t.kind).ask_to_stop(pool, t.id, job.attempt)
            slurm.cancel(job.job_id, signal="TERM", account=job.account)
            _SIGNALLED[job.job_id] = time.monotonic()
        elif time.monotonic() - first > settings.stop_grace_s:
            slurm.cancel(job.job_id, account=job.account)
    except slurm.SlurmError as exc:
        log.warning("could not cancel Slurm job %s: %s", job.job_id, exc)


def _pending(settings: Settings, job: PoolJob, t: Training, state: slurm.JobState) -> None:
    if job.reason == state.reason and job.state == "PENDING":
        return
    words = f"Slurm job {job.job_id} is pending: {slurm.reason_words(state.reason)}"
    with write_session(settings) as sess:
        sess.execute(update(PoolJob).where(PoolJob.id == job.id).values(state="PENDING", reason=state.reason))
        still = sess.execute(update(Training).where(Training.id == t.id, Training.status == "queued",
                                                    Training.attempt == job.attempt).values(wait_reason=words))
        if still.rowcount == 1:  # not for a training cancelled meanwhile (its job is being cancelled)
            record_event(sess, t.id, "wait", status="queued", reason=words,
                         data={"job_id": job.job_id, "slurm_reason": state.reason})


def _running(settings: Settings, job: PoolJob, t: Training, pool: Pool, state: slurm.JobState) -> None:
    if t.status == "queued" and t.attempt == job.attempt:
        with write_session(settings) as sess:
            sess.execute(update(PoolJob).where(PoolJob.id == job.id)
                         .values(state=state.state, reason=None, nodes=state.nodes, gpus=t.world_size,
                                 run_start=state.start or utcnow()))
            transition(sess, t.id, ["queued"], "running", extra_where=[Training.attempt == job.attempt],
                       reason=f"running in Slurm pool {pool.name} on {state.nodes} as job {job.job_id} "
                              f"(account {job.account}, attempt {job.attempt})",
                       data={"job_id": job.job_id, "nodes": state.nodes}, started_at=utcnow(), wait_reason=None,
                       lease_owner=f"slurm:{job.job_id}")
        t.status = "running"
    if t.status == "running":
        _pump(settings, job, t, pool, final=False)


def _sink(settings: Settings, job: PoolJob, t: Training, pool: Pool) -> MetricsSink:
    key = (t.id, job.attempt)
    if key not in _SINKS:
        t.attempt = job.attempt
        _SINKS[key] = MetricsSink(settings, t, f"slurm:{job.job_id}", progress_file(pool, t.id, job.attempt),
                                  f"slurm pool {pool.name}")
    return _SINKS[key]


def _pump(settings: Settings, job: PoolJob, t: Training, pool: Pool, *, final: bool) -> None:
    sink = _sink(settings, job, t, pool)
    if sink.pump(final=final) == "cancel":
        _stop(settings, job, t, pool, slurm.JobState(job.job_id, "RUNNING", "", "", None, None))


def _finished(settings: Settings, job: PoolJob, t: Training, pool: Pool, state: slurm.JobState) -> None:
    if t.status == "queued" and t.attempt == job.attempt and state.nodes and state.nodes != "(null)" \
            and state.state not in REQUEUED_STATES:
        # It ran whole between two polls: the record says it ran, where, and keeps its progress.
        _running(settings, job, t, pool, state)
    if t.status == "running" and t.attempt == job.attempt:
        _pump(settings, job, t, pool, final=True)
    code = state.exit_code
    with session_scope(settings) as sess:
        cancel_requested, cancel_as = sess.execute(select(Training.cancel_requested, Training.cancel_as)
                                                   .where(Training.id == t.id)).one()
    if state.state == "COMPLETED" and code == 0:
        status, reason = "succeeded", f"Slurm job {job.job_id} completed"
    elif cancel_requested and cancel_as == "pruned":
        status, reason = "pruned", f"pruned: its sweep stopped it at a rung; Slurm job {job.job_id} was stopped"
    elif cancel_requested:
        status, reason = "cancelled", f"cancelled: Slurm job {job.job_id} was signalled and stopped (exit code {code})"
    elif state.state == "CANCELLED":
        status = "cancelled"
        reason = f"Slurm job {job.job_id} was cancelled outside gpufleet (scancel, or a Slurm administrator)"
    elif state.state in REQUEUED_STATES:
        status, reason = "queued", f"Slurm preempted or requeued job {job.job_id}; resubmitted from the newest checkpoint"
    elif state.state == "TIMEOUT":
        status, reason = "failed", f"Slurm job {job.job_id} reached its time limit (max_runtime_s)"
    else:
        status, reason = "failed", f"Slurm job {job.job_id} ended {state.state} with exit code {code}"
    _end(settings, job, t, status, reason, code, state.state)


def _end(settings: Settings, job: PoolJob, t: Training, status: str, reason: str, code: int | None,
         slurm_state: str = "UNKNOWN") -> None:
    now = utcnow()
    with write_session(settings) as sess:
        sess.execute(update(PoolJob).where(PoolJob.id == job.id)
                     .values(state=slurm_state, exit_code=code, ended_at=now))
        # Until Slurm's accounting has the job (account() below), it ran until now, as far as this host saw.
        sess.execute(update(PoolJob).where(PoolJob.id == job.id, PoolJob.run_start.is_not(None),
                                           PoolJob.run_end.is_(None)).values(run_end=now))
        if t.attempt == job.attempt:
            values = {"exit_code": code} if status != "queued" else {}
            transition(sess, t.id, ["queued", "running"], status, reason=reason,
                       kind="retry" if status == "queued" else "status",
                       extra_where=[Training.attempt == job.attempt], data={"job_id": job.job_id}, **values)
    _SINKS.pop((t.id, job.attempt), None)
    _SIGNALLED.pop(job.job_id, None)


# How long after a job's end its record is looked for in Slurm's accounting (slurmdbd may lag behind),
# and how often (each look runs sacct, and scontrol where sacct has nothing).
ACCOUNT_WINDOW = timedelta(hours=1)
ACCOUNT_EVERY_S = 15.0
_ACCOUNTED = [float("-inf")]


def account(settings: Settings, limit: int = 20) -> int:
    """Take the start, end and GPUs of recently ended jobs from Slurm's own accounting (sacct, or its
    job-completion log): the usage report counts those. Returns how many records were taken."""
    with session_scope(settings) as sess:
        rows = list(sess.execute(select(PoolJob.id, PoolJob.job_id).where(
            PoolJob.ended_at.is_not(None), PoolJob.ended_at > utcnow() - ACCOUNT_WINDOW,
            PoolJob.run_start.is_not(None), PoolJob.accounted_by.is_(None)).order_by(PoolJob.ended_at).limit(limit)))
    records = slurm.usage_records([job_id for _, job_id in rows])
    taken = 0
    for row_id, job_id in rows:
        rec = records.get(job_id)
        if rec is None or rec.start is None or rec.end is None:
            continue
        values = {"run_start": rec.start, "run_end": rec.end, "accounted_by": rec.source}
        if rec.gpus is not None:
            values["gpus"] = rec.gpus
        with write_session(settings) as sess:
            sess.execute(update(PoolJob).where(PoolJob.id == row_id).values(**values))
        taken += 1
    return taken


def _ship_output(settings: Settings, job: PoolJob, pool: Pool) -> None:
    """New bytes of the job's output file, into the training's log (as a host's log is shipped).

    The file is in the member's folder: read through no link, and only if it is a regular file
    (gpufleet.memberfs). Once, however many API processes poll: the offset is read under the job row's lock
    and moved past the bytes in the same transaction, so a second process waits for the first and reads on
    from where it got to (the row held by the caller may be a pass old). The log reaches the database after
    the commit."""
    with write_session(settings) as sess:
        offset = sess.scalar(select(PoolJob.output_offset).where(PoolJob.id == job.id).with_for_update())
        if offset is None:
            return
        try:
            with memberfs.Dir.root(pool.checkpoint_root) as root:
                data = root.read(memberfs.beneath(pool.checkpoint_root, job.output), offset, 1 << 20) or b""
        except (OSError, ValueError):
            data = b""
        if data:
            logf = BoundedLog(log_path(settings, job.training_id), settings.log_max_bytes)
            try:
                logf.write(data)
            finally:
                logf.close()
            sess.execute(update(PoolJob).where(PoolJob.id == job.id).values(output_offset=offset + len(data)))
    job.output_offset = offset + len(data)
    if data:
        flush(settings, log_path(settings, job.training_id))
