"""From progress lines to ``training_metrics`` rows, events and the lease.

The supervisor calls :meth:`MetricsSink.pump` a few times a second. Lines are
parsed at once; the database is written at most about once a second, in one
transaction that also renews the lease and reads ``cancel_requested``. Fewer,
larger writes keep a fast training from turning into database load.
"""

from __future__ import annotations

import logging
import time
import uuid
from datetime import timedelta
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from gpufleet.config import Settings
from gpufleet.db.models import GPUAllocation, Host, Training, TrainingMetric
from gpufleet.db.session import write_session
from gpufleet.db.types import utcnow
from gpufleet.jobs.earlier_attempts import newest_checkpoint_step, unmerged_reports
from gpufleet.jobs.peak_memory import TRIM_MARGIN, PeakMemory
from gpufleet.jobs.rung_gate import RungRelease
from gpufleet.lifecycle.transitions import record_event
from gpufleet.scheduling.types import fmt_bytes, fmt_bytes_apart
from gpufleet.interactive import progress as session_progress
from gpufleet.trainings.progress import ProgressReader, StragglerWatch

if TYPE_CHECKING:
    from gpufleet.events import Bus

log = logging.getLogger(__name__)

TOPIC_PROGRESS = "training.progress"
# What a step may be: training_metrics.step is a 32-bit integer on every database.
STEP_LIMIT = 2**31


def _estimated_and_shared(t: Training) -> bool:
    """Whether ``t`` shares its GPUs and reserves what the estimate said (not memory a person declared)."""
    est = t.estimate if isinstance(t.estimate, dict) else {}
    return (t.exclusive is False and t.memory_declared is None and t.memory_estimate is not None
            and est.get("total") == t.memory_estimate and est.get("source") != "declared")


class MetricsSink:
    def __init__(self, settings: Settings, t: Training, worker_id: str, progress: Path, host_name: str):
        self.settings = settings
        self.tid: uuid.UUID = t.id
        self.attempt: int = t.attempt
        self.worker_id = worker_id
        self.host_name = host_name
        self.reader = ProgressReader(progress)
        self.rungs = RungRelease(t, progress)  # a sweep's trial waiting at a rung for its verdict
        self.flush_every_s = min(1.0, settings.lease_s / 3)
        # Monotonic time at which the last renewal of the lease began: the
        # lease runs at least ``lease_s`` from then. The supervisor sets the
        # claim's time; each flush that renews moves it on.
        self.renewed_at = time.monotonic()
        # The launcher enforces the collective timeout itself (exit 13); this
        # is the backstop for a launcher that stops reporting altogether.
        self.hang_after_s = 2 * settings.collective_timeout_s + 60
        self.straggler = StragglerWatch()
        # A training across hosts: the host of each global rank, so a straggler's warning names it.
        self.rank_hosts: list[str] | None = None
        self.last_error: dict[str, Any] | None = None
        self.forced_exit_code: int | None = None
        self._metrics: dict[int, TrainingMetric] = {}
        self._events: list[dict[str, Any]] = []
        self._row: dict[str, Any] = {}
        self._last_flush = 0.0
        self._wrote_metrics = False
        self._last_line = time.monotonic()
        self._skipped = 0  # progress lines that could not be read
        self._bus: Bus | None = None
        self._checkpoint_step: int | None = None
        self.checkpoint_path: str | None = None  # the newest checkpoint a line of this attempt reported
        self.checkpoints = 0  # checkpoint lines of this attempt: did a stop's grace see a new one?
        self.on_checkpoint: Callable[[dict[str, Any], float | None], None] | None = None  # the store's upload
        self.loss: float | None = None  # the newest step's loss, which the upload records with a checkpoint
        # The training that asked this one to make room (read with the lease, like a cancel).
        self.preempted_by: uuid.UUID | None = None
        # Per-rank peak memory: NVML's per-process figure, with the ranks' own lines as breakdown.
        self.memory = PeakMemory(reserved=t.memory_estimate, trimmable=_estimated_and_shared(t))
        self._ranks = t.world_size or 1
        self._step: int | None = None  # the newest step the ranks reported
        self._trim_to: int | None = None  # a trimmed reservation not yet written
        self._session_lines: list[dict[str, Any]] = []

    # -- setup -------------------------------------------------------------

    def trim_after_resume(self, ckpt_dir: Path, earlier_progress: list[Path] = ()) -> None:  # type: ignore[assignment]
        """Make the stored curve match the checkpoint this attempt resumes from.

        Rows past the checkpoint are dropped: the resumed run computes those
        steps again and its values replace them. Steps up to the checkpoint
        that no supervisor recorded (a launcher that ran on after its worker
        was killed) are filled in from the earlier attempts' progress files,
        which hold exactly what that launcher computed.
        """
        newest = newest_checkpoint_step(ckpt_dir)
        step = newest[0] if newest else 0
        self._checkpoint_step = newest[0] if newest else None  # where a stop before a new one resumes
        with write_session(self.settings) as sess:
            sess.execute(delete(TrainingMetric).where(TrainingMetric.training_id == self.tid,
                                                      TrainingMetric.step > step))
            if newest:
                have = set(sess.execute(select(TrainingMetric.step).where(
                    TrainingMetric.training_id == self.tid)).scalars())
                for path in earlier_progress:
                    for line in ProgressReader(path).read():
                        if line.get("type") == "step" and int(line["step"]) <= step and int(line["step"]) not in have:
                            self._handle(line)
                            have.add(int(line["step"]))
                self._events = []  # those lines' events were recorded, or belong to a lost attempt
                self._row = {}
                sess.add_all(self._metrics.values())
                self._metrics = {}
                sess.execute(update(Training).where(Training.id == self.tid)
                             .values(last_checkpoint=str(newest[1]), step=step)
                             .execution_options(synchronize_session=False))

    def fill_from_earlier(self, earlier_progress: list[Path]) -> None:
        """Record the steps earlier attempts reported but no supervisor wrote (a script's resume).

        A script's checkpoints are its own files, whose step gpufleet cannot
        know, so nothing is dropped; steps the resumed run reports again
        replace these rows when they are written.
        """
        with write_session(self.settings) as sess:
            have = set(sess.execute(select(TrainingMetric.step).where(
                TrainingMetric.training_id == self.tid)).scalars())
            for path in earlier_progress:
                for line in [*ProgressReader(path).read(), *unmerged_reports(path)]:
                    if line.get("type") == "step" and int(line["step"]) not in have:
                        self._handle(line)
                        have.add(int(line["step"]))
                    elif line.get("type") == "checkpoint" and line.get("step") is not None:
                        # Where a stop before a new checkpoint resumes (steps only grow over attempts).
                        self._checkpoint_step = max(self._checkpoint_step or 0, int(line["step"]))
            self._events, self._row = [], {}
            sess.add_all(self._metrics.values())
            self._metrics = {}

    # -- lines -------------------------------------------------------------

    def note_error(self, err: dict[str, Any]) -> None:
        self.last_error = err

    def note_event(self, level: str, message: str, data: dict[str, Any] | None = None) -> None:
        """An event of the worker's own for the attempt (the share's limit methods, its watchdog), written with
        the next flush."""
        self._event(level, message, data)

    def force_exit_code(self, code: int) -> None:
        self.forced_exit_code = code

    def last_checkpoint_step(self) -> int | None:
        """The step of the newest checkpoint this attempt reported, if any."""
        return self._checkpoint_step

    def take(self, line: dict[str, Any]) -> None:
        """A line the worker itself adds to the attempt's progress (a checkpoint found after the ranks ended)."""
        self._handle(line)

    def hung(self) -> bool:
        return time.monotonic() - self._last_line > self.hang_after_s

    def _event(self, kind: str, reason: str, data: dict[str, Any] | None = None, status: str | None = None) -> None:
        self._events.append({"kind": kind, "reason": reason, "data": data, "status": status})

    def _handle(self, line: dict[str, Any]) -> None:
        kind = line.get("type")
        if kind == "step":
            step = int(line["step"])
            if not 0 <= step < STEP_LIMIT:  # the progress file is the training's account's: a step the column holds
                raise ValueError(f"step {step} is outside 0..{STEP_LIMIT - 1}")
            metrics = {k: v for k, v in (line.get("parts") or {}).items()}
            total = metrics.pop("total_steps", None)  # report(total_steps=...): progress and ETA
            if isinstance(total, (int, float)) and 0 < total < 2**31:
                self._row["max_steps"] = int(total)
            for k in ("samples_per_s", "lr", "grad_norm"):
                if line.get(k) is not None:
                    metrics[k] = line[k]
            times = line.get("rank_step_times")
            loss = None if line.get("loss") is None else float(line["loss"])  # a number, before anything is kept
            self._metrics[step] = TrainingMetric(
                training_id=self.tid, step=step, time=utcnow(), loss=loss,
                metrics=metrics, rank_step_times=times,
            )
            self._row["step"] = step
            self._step = step
            if loss is not None:
                self._row["last_loss"] = self.loss = loss
            for rank, t, med in self.straggler.observe(times):
                host = self.rank_hosts[rank] if self.rank_hosts and rank < len(self.rank_hosts) else None
                where = f" (host {host})" if host else ""
                self._event("warning", f"rank {rank}{where} is a straggler: {t:.3f}s per step vs {med:.3f}s for "
                            "the others", {"rank": rank, "step_time_s": t, "others_median_s": med, "step": step,
                                           **({"host": host} if host else {})})
        elif kind == "checkpoint":
            self._row["last_checkpoint"] = self.checkpoint_path = str(line.get("path"))
            if line.get("step") is not None:
                self._checkpoint_step = int(line["step"])
            self.checkpoints += 1
            at = f"at step {line['step']}" if line.get("step") is not None else "(no step reported yet)"
            note = f" ({line['note']})" if line.get("note") else ""
            self._event("checkpoint", f"checkpoint {at}: {Path(str(line.get('path'))).name}{note}",
                        {"step": line.get("step"), "path": line.get("path"), "source": line.get("source")})
            if self.on_checkpoint is not None:
                self.on_checkpoint(line, self.loss)
        elif kind == "stopped":  # a script's ranks ended on a stop request: not an error
            at = f"last reported step {line['step']}" if line.get("step") is not None else "no step reported"
            self._event("info", f"the ranks stopped on request ({at})",
                        {"step": line.get("step")})
        elif kind == "peak_memory":
            per_rank = [int(x) for x in (line.get("per_rank") or []) if x is not None]
            if per_rank:
                self._row.update(self.memory.ranks_reported(per_rank, line.get("device_kind")))
        elif kind == "error":
            self.last_error = line
            failed = line.get("rank")
            who = f"rank {failed}" if failed is not None else "launcher"
            # A stop that ran out of grace is the stop's story, told by its end event; not an error of the code.
            self._event("warning" if line.get("kind") == "interrupted" else "error",
                        f"{who}: {line.get('kind')}: {line.get('message')}",
                        {k: line.get(k) for k in ("rank", "kind", "message")})
        elif kind == "start":
            self._event("info", f"launcher started {line.get('world_size', '?')} rank(s)",
                        {k: v for k, v in line.items() if k != "type"})
        elif kind == "environment":  # the training's own packages: building, waiting for a build, ready
            message = str(line.get("message"))
            self._event("environment", message, {k: v for k, v in line.items() if k != "type"})
            # The phase shows in the status too, while it lasts and once it is done.
            self._row["status_reason"] = (message if line.get("phase") != "ready" else
                                          f"running on host {self.host_name} (attempt {self.attempt}); {message}")
        elif kind == "warning":  # e.g. GPUs of several vendors sharing one gloo process group
            self._event("warning", str(line.get("message")), {k: v for k, v in line.items() if k != "type"})
        elif kind == "startup":  # where each rank's start-up went (engine/startup.py)
            phases_of = line.get("per_rank") or []
            slowest = max((sum(r) for r in phases_of), default=0.0)
            self._event("info", f"start-up: {slowest:.1f} s to the first step (slowest rank)",
                        {"startup": {"phases": line.get("phases"), "per_rank": phases_of}})
        elif kind in session_progress.LINES:  # a session's launcher: ready, notebook activity
            self._session_lines.append(line)
        elif kind == "layout":  # what each rank runs on: device, visibility variable, precision, process group
            self._event("info", f"ranks of parallel_mode {line.get('parallel_mode')}",
                        {k: v for k, v in line.items() if k != "type"})

    # -- the database --------------------------------------------------------

    def pump(self, final: bool = False) -> str:
        """Read new lines; write when due. Returns ``ok``, ``cancel``, ``preempt``, ``reclaim`` or ``lost``."""
        self._row.update(self.memory.sample())
        lines = self.reader.read()
        if lines:
            self._last_line = time.monotonic()
        for line in lines:
            try:
                self._handle(line)
            except (KeyError, TypeError, ValueError, OverflowError) as exc:
                log.warning("ignoring a malformed progress line for %s: %r (%s)", self.tid, line, exc)
                self._skipped += 1
                if self._skipped == 1:  # once: a program that writes many would fill the events
                    self._event("warning", f"a progress line was skipped ({exc}); later ones that cannot be "
                                "read are skipped too, without a word here", {"line": str(line)[:200]})
        self._judge_reservation(final)
        now = time.monotonic()
        # The first step is written at once: it is what a person waits for.
        first_step = bool(self._metrics) and not self._wrote_metrics
        if not final and not first_step \
                and now - self._last_flush < self.rungs.flush_every(self._step, self.flush_every_s):
            return "ok"
        self._last_flush = now
        return self._flush(final)

    def _judge_reservation(self, final: bool) -> None:
        """Say a rank above its reservation; trim a reservation the steady state leaves well above its peak
        (not at the end: the GPUs are about to be released whole)."""
        if (over := self.memory.overrun()) is not None:
            who, (held, reserved) = (f"rank {over['rank']}" if self._ranks > 1 else "its process",
                                     fmt_bytes_apart(over["measured"], over["reserved"]))
            self._event("warning", f"{who} holds {held} on its GPU, over the "
                        f"{reserved} reserved for it: work placed beside it may run out of "
                        "memory; the next estimate of this shape counts what this run measures", over)
        if not final and (trim := self.memory.trim(self._step)) is not None:
            self._trim_to = trim["to"]
            self._event("info", f"reservation trimmed from {fmt_bytes(trim['from'])} to {fmt_bytes(trim['to'])} "
                        f"per GPU: the ranks hold at most {fmt_bytes(trim['measured'])} at step {trim['step']} "
                        f"(+{TRIM_MARGIN:.0%}); the rest of each GPU can take other work", trim)

    def _flush(self, final: bool) -> str:
        if final and (memory := self.memory.summary()) is not None:
            self._event("info", "peak memory per rank: " + _peaks_line(memory), memory)
        metrics, events, row = list(self._metrics.values()), self._events, self._row
        began = time.monotonic()
        with write_session(self.settings) as sess:
            values: dict[str, Any] = dict(row)
            if not final:
                values["lease_expires_at"] = utcnow() + timedelta(seconds=self.settings.lease_s)
            answer = sess.execute(
                update(Training)
                # Fenced by the attempt: a newer attempt owns the row once it started.
                .where(Training.id == self.tid, Training.status == "running",
                       Training.lease_owner == self.worker_id, Training.attempt == self.attempt)
                .values(**values)
                .returning(Training.cancel_requested, Training.preempted_by, Training.reclaim_requested,
                           Training.passed_rung_step)
                .execution_options(synchronize_session=False)
            ).one_or_none()
            if answer is None:
                sess.rollback()
                return "lost"
            cancel, preempted_by, reclaim, passed = answer
            self.rungs.let_past(passed)
            if self._trim_to is not None:
                # This host's GPUs of this attempt: what the scheduler counts as taken on them.
                on_this_host = select(Host.id).where(Host.name == self.host_name).scalar_subquery()
                sess.execute(update(GPUAllocation).where(
                    GPUAllocation.training_id == self.tid, GPUAllocation.released_at.is_(None),
                    GPUAllocation.host_id == on_this_host, GPUAllocation.reserved_memory > self._trim_to,
                ).values(reserved_memory=self._trim_to).execution_options(synchronize_session=False))
                self._trim_to = None
            self._write(sess, metrics, events)
        if not final:
            self.renewed_at = began
        self._wrote_metrics = self._wrote_metrics or bool(metrics)
        self._metrics, self._events, self._row = {}, [], {}
        self._publish(metrics, events)
        if cancel:
            return "cancel"
        if preempted_by is not None:
            self.preempted_by = preempted_by
            return "preempt"
        return "reclaim" if reclaim else "ok"

    def _write(self, sess: Session, metrics: list[TrainingMetric], events: list[dict[str, Any]]) -> None:
        if metrics:
            # A resumed attempt may report a step the previous one reported too.
            sess.execute(delete(TrainingMetric).where(
                TrainingMetric.training_id == self.tid,
                TrainingMetric.step.in_([m.step for m in metrics]),
            ))
            sess.add_all(metrics)
        for ev in events:
            record_event(sess, self.tid, ev["kind"], status=ev["status"], reason=ev["reason"], data=ev["data"])
        if self._session_lines:
            session_progress.apply(sess, self.tid, self._session_lines, self.host_name)
            self._session_lines = []

    def _publish(self, metrics: list[TrainingMetric], events: list[dict[str, Any]]) -> None:
        if not metrics and not events:
            return
        try:
            if self._bus is None:
                from gpufleet.events import get_bus

                self._bus = get_bus(self.settings)
            last = max(metrics, key=lambda m: m.step) if metrics else None
            self._bus.publish(TOPIC_PROGRESS, {
                "training_id": str(self.tid),
                "host": self.host_name,
                "step": last.step if last else None,
                "loss": last.loss if last else None,
                "events": [{"kind": e["kind"], "reason": e["reason"]} for e in events],
            })
        except Exception:  # live events are best effort; the tables are the truth
            log.debug("could not publish progress for %s", self.tid, exc_info=True)


def _peaks_line(memory: dict[str, Any]) -> str:
    def gib(xs: list[int]) -> str:
        return ", ".join(f"{x / 2**30:.2f} GiB" for x in xs)

    parts = []
    if memory["nvml_per_rank"]:
        parts.append(f"{gib(memory['nvml_per_rank'])} as NVML sees the processes")
    if memory["reported_per_rank"]:
        parts.append(f"{gib(memory['reported_per_rank'])} reported by the ranks ({memory['reported_kind']})")
    return "; ".join(parts)
