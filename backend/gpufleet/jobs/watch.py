"""Watching one launched attempt until its launcher exits: progress, stops, cancel, hang, lease.

:mod:`gpufleet.jobs.supervisor` claims a training, writes its spec and starts
its launcher; an :class:`AttemptWatch` then polls it. Each poll writes the
progress the ranks reported (which renews the lease), asks the ranks to stop
when the worker stops, a preemptor or the runtime limit asks, kills them on a
cancel, a hang, a lost lease or a lost host of a training across hosts, and a
thread of its own kills them before the lease can run out unrenewed.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from collections.abc import Callable
from typing import Any

from sqlalchemy import update
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from gpufleet.config import Settings
from gpufleet.db.models import Training
from gpufleet.db.session import write_session
from gpufleet.devices.backend import DeviceBackend
from gpufleet.jobs import checkpoint_found, procs, rendezvous, share_watch, stops
from gpufleet.jobs.kinds import work_kind
from gpufleet.jobs.logs import BoundedLog, launcher_end
from gpufleet.jobs.metrics_sink import MetricsSink

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


def stopping() -> bool:
    return _STOPPING.is_set()


def unreachable(exc: BaseException) -> bool:
    """Whether a failed write means the database is away (or busy), which an attempt waits out, rather than a
    write it refused, which waiting would not change."""
    return isinstance(exc, (OperationalError, InterfaceError)) or (
        isinstance(exc, DBAPIError) and exc.connection_invalidated)


def attempt_fence(t: Training, worker_id: str) -> list[Any]:
    """The WHERE that lets only this attempt, while it holds the lease, write the row."""
    return [Training.id == t.id, Training.status == "running", Training.lease_owner == worker_id,
            Training.attempt == t.attempt]


def _fence(deadline: Callable[[], float], pgid: int, done: threading.Event, fenced: threading.Event) -> None:
    """Kill the attempt's process group before its lease can run out unrenewed.

    A thread of its own: the loop that renews may itself be stuck in a
    database call. Renewals that land in time push the deadline on.
    """
    while not done.wait(POLL_S):
        if time.monotonic() > deadline():
            fenced.set()
            procs.signal_group(pgid, signal.SIGKILL)
            return


@dataclass
class AttemptWatch:
    """One launched attempt under watch; what it saw decides the outcome (:mod:`gpufleet.jobs.supervisor`)."""

    settings: Settings
    t: Training
    host_name: str
    worker_id: str
    backend: DeviceBackend
    logf: BoundedLog
    sink: MetricsSink
    proc: subprocess.Popen
    lifeline: int
    progress_path: Path
    claimed_at: float
    gang: dict | None
    stop: stops.Stop | None = None
    cancelled: bool = False
    lost: bool = False
    leader: rendezvous.LeaderWatch | None = None
    verdict: rendezvous.Verdict | None = None
    ckpt_dir: Path | None = None
    ckpt_mark: checkpoint_found.Mark = None  # what the checkpoint dir held before the launcher started
    checkpoints_before_cancel: int | None = None
    # Since when (monotonic) this worker's writes fail for want of the database, while they do.
    unreachable_since: float | None = None
    outage_s: float | None = None  # the outage that outlasted GPUFLEET_DB_OUTAGE_GRACE_S and stopped the ranks
    sink_failure: str | None = None  # why this worker could not record the progress, when it could not
    share: share_watch.ShareWatch | None = None  # the watchdog of work that does not hold its GPUs whole

    @property
    def pgid(self) -> int:
        return self.proc.pid  # start_new_session: the launcher leads its own group

    def run(self) -> int:
        """Watch until the launcher exits and its processes are gone; its exit code (or the one forced)."""
        self._register()
        self.leader = rendezvous.LeaderWatch(self.settings, self.settings, self.t) if self.gang else None
        done, fenced = threading.Event(), threading.Event()
        threading.Thread(target=_fence, args=(self.fence_deadline, self.pgid, done, fenced),
                         name=f"gpufleet-fence-{self.t.id}", daemon=True).start()
        try:
            self._poll_until_exit(fenced)
        finally:
            done.set()
            code = self._reap()
        return self.sink.forced_exit_code if self.sink.forced_exit_code is not None else code

    def fence_deadline(self) -> float:
        """When (monotonic) this attempt must be gone unless a renewal lands first.

        While the database cannot be reached its judge counts none of that
        time against the lease (gpufleet.jobs.reach), so the ranks keep
        running up to ``db_outage_grace_s`` more; a worker merely too slow
        to renew has no such excuse.
        """
        end = self.sink.renewed_at + self.settings.lease_s - FENCE_MARGIN_S
        return end + self.settings.db_outage_grace_s if self.unreachable_since is not None else end

    def _register(self) -> None:
        """Name the launcher where recovery, the drivers' process list and the row can find it."""
        procs.write_pidfile(self.settings, self.host_name, self.t.id, self.pgid, self.worker_id)
        self.backend.training_started(self.t.gpu_ids or [], self.proc.pid, str(self.t.id), self.t.memory_estimate,
                                      busy=work_kind(self.t.kind).busy_from_start)
        self.sink.memory.watch_processes(self.backend.nvml, self.t.gpu_ids or [], self.proc.pid)
        if share_watch.held_to(self.t) is not None and self.sink.memory.reserved:
            self.share = share_watch.ShareWatch(self.backend.nvml, self.t.gpu_ids or [], self.proc.pid,
                                                share_watch.budget(self.sink.memory.reserved),
                                                self.settings.share_over_s, self.settings.share_sample_s)
            plan = share_watch.limit_plan(self.backend.nvml, (self.t.gpu_ids or [0])[0])
            self.sink.note_event("info", plan.say(self.sink.memory.reserved // share_watch.MIB), plan.to_json())
        with write_session(self.settings) as sess:
            sess.execute(update(Training).where(*attempt_fence(self.t, self.worker_id))
                         .values(launcher_pid=self.proc.pid).execution_options(synchronize_session=False))

    def _poll_until_exit(self, fenced: threading.Event) -> None:
        while self.proc.poll() is None:
            time.sleep(POLL_S)
            if fenced.is_set():
                break
            self._enforce_stop()  # before the database: a worker's stop works while it is away
            try:
                state = self._pump()
            except Exception as exc:  # noqa: BLE001 - a fault of this worker ends the attempt as one, named
                if not unreachable(exc):
                    self._sink_failed(exc)
                    break
                # An outage must not kill a training; the lines wait in the
                # sink. One that outlasts the grace ends in the fence thread.
                if self.leader is not None:
                    self.leader.reach.failed()  # the other hosts' silence meanwhile is not theirs
                if self.unreachable_since is None:
                    self.unreachable_since = time.monotonic()
                    self.logf.line(f"[gpufleet] cannot reach the database; the ranks keep running for up to "
                                   f"{self.settings.db_outage_grace_s:.0f}s (GPUFLEET_DB_OUTAGE_GRACE_S)")
                log.warning("training %s: cannot reach the database (%s); retrying", self.t.id, exc)
                continue
            if self.unreachable_since is not None and self.sink.renewed_at > self.unreachable_since:
                away = time.monotonic() - self.unreachable_since
                self.logf.line(f"[gpufleet] the database is back after {away:.0f}s; "
                               "the lease is renewed and the training goes on")
                self.unreachable_since = None
            if state == "lost":
                self.lost = True
                self.logf.line("[gpufleet] the lease on this training was lost; stopping it here")
                procs.stop_group(self.pgid, CANCEL_GRACE_S)
                break
            self._react(state)
        if fenced.is_set() and not self.lost and self.unreachable_since is not None:
            self.outage_s = time.monotonic() - self.unreachable_since
            self.logf.line(f"[gpufleet] the database could not be reached for {self.outage_s:.0f}s, longer than "
                           f"GPUFLEET_DB_OUTAGE_GRACE_S ({self.settings.db_outage_grace_s:.0f}s); the ranks were "
                           "stopped so that no other attempt runs beside them")
        elif fenced.is_set() and not self.lost:
            self.lost = True
            self.logf.line("[gpufleet] the lease ran out before this worker could renew it; the training was "
                           "stopped here so that no other attempt runs beside it")

    def _sink_failed(self, exc: Exception) -> None:
        """This worker cannot record the attempt's progress: stop the ranks now, while its lease still holds,
        rather than let the lease lapse into a story of a lost host."""
        self.sink_failure = f"{type(exc).__name__}: {exc}"[:300]
        log.exception("training %s: the progress could not be recorded; stopping the ranks", self.t.id)
        self.logf.line(f"[gpufleet] this worker could not record the training's progress ({self.sink_failure}); "
                       "stopping the ranks")
        procs.stop_group(self.pgid, CANCEL_GRACE_S)

    def _enforce_stop(self) -> None:
        self.stop = self._ask_to_stop("ok")
        if self.stop is None and self.share is not None and not self.cancelled:
            self.share.budget = share_watch.budget(self.sink.memory.reserved or self.share.budget)
            if (over := self.share.check()) is not None:
                self.stop = stops.Stop("share", time.monotonic() + self.settings.stop_grace_s,
                                       over.note(self.settings.stop_grace_s), overrun=over,
                                       checkpoints_before=self.sink.checkpoints)
                self.logf.line(f"[gpufleet] {self.stop.note}")
                self.sink.note_event("warning", f"share watchdog: {self.stop.note}", over.to_json())
                work_kind(self.t.kind).ask_to_stop(self.progress_path)  # before the signal the ranks get
                procs.signal_group(self.pgid, signal.SIGTERM)
        if self.stop is not None and time.monotonic() > self.stop.deadline:
            self.logf.line("[gpufleet] the training did not stop within the grace; killing it")
            procs.stop_group(self.pgid, 0.0)

    def _pump(self) -> str:
        """Write the progress (renewing the lease) and hear from the other hosts of a training across hosts."""
        state = self.sink.pump()
        if self.leader is not None and self.verdict is None and (verdict := self.leader.check()) is not None:
            self.verdict = verdict
            self.logf.line(f"[gpufleet] {verdict.reason}; stopping the ranks on every host")
            procs.stop_group(self.pgid, CANCEL_GRACE_S)
        return state

    def _react(self, state: str) -> None:
        self.stop = self._ask_to_stop(state)
        if state == "cancel" and not self.cancelled:
            self.cancelled = True
            self.checkpoints_before_cancel = self.sink.checkpoints
            self.logf.line("[gpufleet] cancel requested; stopping every rank")
            procs.stop_group(self.pgid, CANCEL_GRACE_S)
        if self.sink.hung():
            after = self.sink.hang_after_s
            self.logf.line(f"[gpufleet] no progress for {after:.0f}s; killing the training")
            self.sink.note_error({"rank": None, "kind": "timeout",
                                  "message": f"no progress for {after:.0f}s (hung collective?)"})
            procs.stop_group(self.pgid, CANCEL_GRACE_S)
            self.sink.force_exit_code(13)

    def _ask_to_stop(self, state: str) -> stops.Stop | None:
        """Ask the ranks once to checkpoint and stop, when anyone wants it stopped (:mod:`gpufleet.jobs.stops`)."""
        if self.stop is not None or self.cancelled:
            return self.stop
        asked = stops.requested(stopping=stopping(), state=state, preempted_by=self.sink.preempted_by,
                                max_runtime_s=self.t.max_runtime_s, running_s=time.monotonic() - self.claimed_at,
                                grace_s=self.settings.stop_grace_s)
        if asked is not None:
            asked.checkpoints_before = self.sink.checkpoints
            self.logf.line(f"[gpufleet] {asked.note}")
            work_kind(self.t.kind).ask_to_stop(self.progress_path)  # before the signal the ranks get
            procs.signal_group(self.pgid, signal.SIGTERM)
        return asked

    def _reap(self) -> int:
        procs.stop_group(self.pgid, 0.0)  # leftover ranks of a launcher that died first
        code = self.proc.wait()
        os.close(self.lifeline)
        self.backend.training_ended(self.proc.pid)
        procs.remove_pidfile(self.settings, self.host_name, self.t.id)
        if self.ckpt_dir is not None and (found := checkpoint_found.left_unreported(
                self.ckpt_dir, self.ckpt_mark, self.sink.checkpoint_path)) is not None:
            self.logf.line(f"[gpufleet] found checkpoint {Path(found['path']).name}, written after the last one "
                           "the launcher reported")
            self.sink.take(found)
        try:
            self.sink.pump(final=True)
        except Exception:  # the attempt's end is still written (supervisor), whatever this was
            log.warning("training %s: the last progress could not be written", self.t.id, exc_info=True)
        over, seen = self.stop.overrun if self.stop else None, self.sink.memory.watch
        if over is not None and seen is not None and self.stop is not None:
            # What it held until its processes were gone (a stop's checkpoint, the grace) counts too.
            self.stop.overrun = replace(over, peak=max(over.peak, *seen.peaks))
        self.logf.line(f"[gpufleet] {launcher_end(code, self._stopped_why())}")
        self.logf.close()
        return code

    def _stopped_why(self) -> str | None:
        """Why this worker stopped the launcher, if it did."""
        if self.cancelled:
            return "cancel requested"
        if self.verdict is not None:
            return self.verdict.reason
        if self.lost:
            return "the lease on this training was lost"
        if self.sink_failure is not None:
            return "its progress could not be recorded"
        if self.stop is not None:
            return self.stop.note.split(";")[0]
        if self.sink.forced_exit_code is not None:
            return "no progress (hung)"
        return None
