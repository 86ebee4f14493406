"""The pool's word on each of its jobs, carried into its training: status, wait reason, progress, log, end.

One pass (:func:`poll`) asks each pool's kind (:mod:`gpufleet.pools.place`;
Slurm: ``squeue``) about all its live jobs at once, in gpufleet's words, then
per job: pending keeps the training queued with the scheduler's reason in
words; running moves it to ``running`` on the job's nodes and pumps the ranks'
progress lines (the same :class:`~gpufleet.jobs.metrics_sink.MetricsSink` a
team host's supervisor uses); an end writes the status from the job's state
and exit code. A cancel in gpufleet becomes the kind's TERM to the ranks
(they checkpoint and stop; Slurm: ``scancel --signal=TERM``), then the job's
end after the stop grace; a job cancelled outside gpufleet ends its training
``cancelled`` with that reason. Nothing here asks which scheduler it is.
"""

from __future__ import annotations

import logging
import time
import uuid
from datetime import timedelta
from typing import Any

from sqlalchemy import select, update

from gpufleet import memberfs
from gpufleet.config import Settings, StoreSettings, WorkerSettings
from gpufleet.db.pools import Pool, PoolJob
from gpufleet.db.session import rows_changed, session_scope, write_session
from gpufleet.db.types import utcnow
from gpufleet.jobs.log_shipper import flush
from gpufleet.jobs.logs import BoundedLog, log_path
from gpufleet.jobs import ckpt_pools
from gpufleet.jobs.metrics_sink import MetricsSink
from gpufleet.lifecycle.models import Training
from gpufleet.lifecycle.transitions import record_event, transition
from gpufleet.pools.place import LIVE_STATES, Accounted, JobReport, PlaceError, PlaceKind
from gpufleet.pools.errors import PoolError
from gpufleet.pools.service import kind_of
from gpufleet.pools.attempt import progress_file
from gpufleet.pools.submit import lease_owner, on_pool

log = logging.getLogger(__name__)

ACTIVE = ("queued", "scheduled", "running")
# In this process: each running job's progress reader, and when a cancel's TERM was sent.
_SINKS: dict[tuple[uuid.UUID, int], MetricsSink] = {}
_SIGNALLED: dict[str, float] = {}


def _live_jobs(settings: StoreSettings) -> list[tuple[PoolJob, Training, Pool]]:
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
        except PlaceError as exc:
            log.warning("could not read a pool's accounting: %s", exc)
    live = _live_jobs(settings)
    by_kind: dict[str, list[tuple[PoolJob, Training, Pool]]] = {}
    for row in live:
        by_kind.setdefault(row[2].kind, []).append(row)
    for rows in by_kind.values():
        try:
            kind = kind_of(rows[0][2])
            states = kind.poll([job for job, _, _ in rows])
        except (PoolError, PlaceError) as exc:  # this kind's scheduler is away; the others go on
            log.warning("could not read pool jobs: %s", exc)
            continue
        for job, t, pool in rows:
            try:
                _one(settings, kind, job, t, pool, states.get(job.job_id))
            except Exception:  # one job's trouble must not stop the others' updates
                log.exception("pool job %s of training %s", job.job_id, t.id)
    return len(live)


def _one(settings: Settings, kind: PlaceKind, job: PoolJob, t: Training, pool: Pool, state: JobReport | None) -> None:
    if t.attempt != job.attempt or t.status not in ACTIVE or t.cancel_requested:
        _stop(settings, kind, job, t, pool, state)
    if state is None:
        _end(settings, job, t, "failed", f"{kind.label} no longer knows job {job.job_id} (it ended with no record: "
                                         "is its accounting configured?)", None, "failed")
        return
    _ship_output(settings, job, pool)
    if state.state == "pending":
        _pending(settings, kind, job, t, state)
    elif state.state == "running":
        _running(settings, kind, job, t, pool, state)
    else:
        _finished(settings, kind, job, t, pool, state)


def _stop(settings: WorkerSettings, kind: PlaceKind, job: PoolJob, t: Training, pool: Pool,
          state: JobReport | None) -> None:
    """A cancel asked in gpufleet (or an attempt superseded): TERM first, the kill after the grace."""
    if state is None or state.state not in LIVE_STATES:
        return
    first = _SIGNALLED.get(job.job_id)
    try:
        if state.state == "pending":
            kind.signal(job, None)
        elif first is None:
            on_pool(t.kind).ask_to_stop(pool, t.id, job.attempt)
            kind.signal(job, "TERM")
            _SIGNALLED[job.job_id] = time.monotonic()
        elif time.monotonic() - first > settings.stop_grace_s:
            kind.signal(job, None)
    except PlaceError as exc:
        log.warning("could not cancel %s job %s: %s", kind.label, job.job_id, exc)


def _pending(settings: StoreSettings, kind: PlaceKind, job: PoolJob, t: Training, state: JobReport) -> None:
    if job.reason == state.reason_code and job.state == "pending":
        return
    words = f"{kind.label} job {job.job_id} is pending: {state.reason}"
    with write_session(settings) as sess:
        sess.execute(update(PoolJob).where(PoolJob.id == job.id).values(state="pending", reason=state.reason_code))
        still = sess.execute(update(Training).where(Training.id == t.id, Training.status == "queued",
                                                    Training.attempt == job.attempt).values(wait_reason=words))
        if rows_changed(still) == 1:  # not for a training cancelled meanwhile (its job is being cancelled)
            record_event(sess, t.id, "wait", status="queued", reason=words,
                         data={"job_id": job.job_id, f"{kind.name}_reason": state.reason_code})


def _running(settings: Settings, kind: PlaceKind, job: PoolJob, t: Training, pool: Pool, state: JobReport) -> None:
    if t.status == "queued" and t.attempt == job.attempt:
        with write_session(settings) as sess:
            sess.execute(update(PoolJob).where(PoolJob.id == job.id)
                         .values(state="running", reason=None, nodes=state.nodes, gpus=t.world_size,
                                 run_start=state.start or utcnow()))
            transition(sess, t.id, ["queued"], "running", extra_where=[Training.attempt == job.attempt],
                       reason=f"running in {kind.label} pool {pool.name} on {state.nodes} as job {job.job_id} "
                              f"(account {job.account}, attempt {job.attempt})",
                       data={"job_id": job.job_id, "nodes": state.nodes}, started_at=utcnow(), wait_reason=None,
                       lease_owner=lease_owner(pool, job.job_id))
        t.status = "running"
    if t.status == "running":
        _pump(settings, kind, job, t, pool, final=False)


def _sink(settings: Settings, kind: PlaceKind, job: PoolJob, t: Training, pool: Pool) -> MetricsSink:
    key = (t.id, job.attempt)
    if key not in _SINKS:
        t.attempt = job.attempt
        _SINKS[key] = MetricsSink(settings, t, lease_owner(pool, job.job_id), progress_file(pool, t.id, job.attempt),
                                  f"{kind.label} pool {pool.name}")
        _SINKS[key].on_checkpoint = ckpt_pools.on_checkpoint(pool, t, job.attempt, kind.label)  # to the store
    return _SINKS[key]


def _pump(settings: Settings, kind: PlaceKind, job: PoolJob, t: Training, pool: Pool, *, final: bool) -> None:
    sink = _sink(settings, kind, job, t, pool)
    if sink.pump(final=final) == "cancel":
        _stop(settings, kind, job, t, pool, JobReport(job.job_id, "running"))


def _outcome(kind: PlaceKind, job: PoolJob, state: JobReport, cancel_requested: bool,
             cancel_as: str | None) -> tuple[str, str]:
    """The training's status and reason from its job's end."""
    code, what = state.exit_code, f"{kind.label} job {job.job_id}"
    if state.state == "completed" and code == 0:
        return "succeeded", f"{what} completed"
    if cancel_requested and cancel_as == "pruned":
        return "pruned", f"pruned: its sweep stopped it at a rung; {what} was stopped"
    if cancel_requested:
        return "cancelled", f"cancelled: {what} was signalled and stopped (exit code {code})"
    if state.state == "cancelled":
        return "cancelled", f"{what} was cancelled outside gpufleet (by {kind.label} or its administrator)"
    if state.state == "requeued":
        return "queued", f"{kind.label} preempted or requeued job {job.job_id}; resubmitted from the newest checkpoint"
    if state.state == "timeout":
        return "failed", f"{what} reached its time limit (max_runtime_s)"
    return "failed", f"{what} ended {state.native or state.state} with exit code {code}"


def _finished(settings: Settings, kind: PlaceKind, job: PoolJob, t: Training, pool: Pool, state: JobReport) -> None:
    if t.status == "queued" and t.attempt == job.attempt and state.nodes and state.state != "requeued":
        # It ran whole between two polls: the record says it ran, where, and keeps its progress.
        _running(settings, kind, job, t, pool, state)
    if t.status == "running" and t.attempt == job.attempt:
        _pump(settings, kind, job, t, pool, final=True)
    with session_scope(settings) as sess:
        cancel_requested, cancel_as = sess.execute(select(Training.cancel_requested, Training.cancel_as)
                                                   .where(Training.id == t.id)).one()
    status, reason = _outcome(kind, job, state, cancel_requested, cancel_as)
    if status == "failed" and (said := output_tail(job, pool)):
        reason = f"{reason}; its output ends: {said}"
    _end(settings, job, t, status, reason, state.exit_code, state.state)


# Words that mark the line of an output that says why a job failed (a Python exception's line, the launcher's
# "rank 0 exited with code 1: …", the scheduler's own "error: execve(): …: Permission denied").
_TELLING = ("error", "Error", "denied", "No such file", "not found", "Killed", "exited with code")


def output_tail(job: PoolJob, pool: Pool, window: int = 8192) -> str | None:
    """The line of the end of the job's output that says most of why it ended: the last that names an error,
    else the last one. Read from the member's folder as its log is (gpufleet.memberfs), at most ``window``
    bytes before where the log has been shipped to."""
    end = job.output_offset or 0
    try:
        with memberfs.Dir.root(pool.checkpoint_root) as root:
            data = root.read(memberfs.beneath(pool.checkpoint_root, job.output), max(0, end - window), window)
    except (OSError, ValueError):
        return None
    lines = [x.strip() for x in (data or b"").decode("utf-8", "replace").splitlines() if x.strip()]
    if not lines:
        return None
    # A line that only restates the exit code (srun's "Exited with exit code 13") says less than the one before.
    telling = [x for x in lines if any(w in x for w in _TELLING)]
    line = next((x for x in reversed(telling) if "exit code" not in x), telling[-1] if telling else lines[-1])
    return line if len(line) <= 300 else line[:297] + "..."


def _end(settings: StoreSettings, job: PoolJob, t: Training, status: str, reason: str, code: int | None,
         job_state: str) -> None:
    now = utcnow()
    with write_session(settings) as sess:
        sess.execute(update(PoolJob).where(PoolJob.id == job.id)
                     .values(state=job_state, exit_code=code, ended_at=now))
        # Until Slurm's accounting has the job (account() below), it ran until now, as far as this host saw.
        sess.execute(update(PoolJob).where(PoolJob.id == job.id, PoolJob.run_start.is_not(None),
                                           PoolJob.run_end.is_(None)).values(run_end=now))
        if t.attempt == job.attempt:
            exit_code: dict[str, Any] = {"exit_code": code} if status != "queued" else {}
            transition(sess, t.id, ["queued", "running"], status, reason=reason,
                       kind="retry" if status == "queued" else "status",
                       extra_where=[Training.attempt == job.attempt], data={"job_id": job.job_id}, **exit_code)
    _SINKS.pop((t.id, job.attempt), None)
    _SIGNALLED.pop(job.job_id, None)


# How long after a job's end its record is looked for in its pool's accounting (Slurm's slurmdbd may lag),
# and how often (each look runs sacct, and scontrol where sacct has nothing).
ACCOUNT_WINDOW = timedelta(hours=1)
ACCOUNT_EVERY_S = 15.0
_ACCOUNTED = [float("-inf")]


def account(settings: StoreSettings, limit: int = 20) -> int:
    """Take the start, end and GPUs of recently ended jobs from each pool's own accounting (Slurm: sacct, or
    its job-completion log): the usage report counts those. Returns how many records were taken."""
    with session_scope(settings) as sess:
        rows = list(sess.execute(select(PoolJob.id, PoolJob.job_id, Pool).join(Pool, Pool.id == PoolJob.pool_id)
                                 .where(PoolJob.ended_at.is_not(None), PoolJob.ended_at > utcnow() - ACCOUNT_WINDOW,
                                        PoolJob.run_start.is_not(None), PoolJob.accounted_by.is_(None))
                                 .order_by(PoolJob.ended_at).limit(limit)))
        sess.expunge_all()
    records: dict[tuple[str, str], Accounted] = {}
    for kind in {pool.kind for _, _, pool in rows}:
        try:
            place = kind_of(next(pool for _, _, pool in rows if pool.kind == kind))
        except PoolError:
            continue
        found = place.accounting([job_id for _, job_id, pool in rows if pool.kind == kind])
        records.update({(kind, job_id): rec for job_id, rec in found.items()})
    taken = 0
    for row_id, job_id, pool in rows:
        rec = records.get((pool.kind, job_id))
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
