"""Every other host of a training across hosts: wait for the rendezvous, run this host's ranks, beat.

The member host's worker (:func:`run_follower`) waits for the rendezvous of
the running attempt the rank-0 host published (:mod:`gpufleet.jobs.rendezvous`),
checks that it sees the marker (the checkpoint root must be shared: rank 0
checkpoints there and every rank resumes from it), starts its local ranks with
their global ranks and beats its ``gang_members`` row. It stops its ranks as
soon as the training is no longer running this attempt, is cancelled, or the
rank-0 host's lease runs out; when the training succeeded it lets them end on
their own first.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select, update

from gpufleet import memberfs
from gpufleet.config import Settings, StoreSettings, WorkerSettings
from gpufleet.db.models import GPU, GangMember, GangRendezvous, Training
from gpufleet.db.session import rows_changed, session_scope, write_session
from gpufleet.db.types import utcnow
from gpufleet.devices.backend import device_backend
from gpufleet.jobs import procs
from gpufleet.jobs.log_shipper import ShippedLog
from gpufleet.jobs.reach import Reach
from gpufleet.jobs.logs import BoundedLog, launcher_end
from gpufleet.jobs.rendezvous import BEAT_S, launch_env, marker_path, spec_gang
from gpufleet.lifecycle.transitions import get_training

# Past the end of the rank-0 host's lease before the other hosts stop their ranks.
LEASE_GRACE_S = 1.0
STOP_GRACE_S = 2.0
# After rank 0's host ended the training as succeeded, how long this host's ranks may take to exit.
END_GRACE_S = 10.0


def is_follower(settings: StoreSettings, tid: uuid.UUID, host_id: uuid.UUID) -> bool:
    """Whether this host runs other ranks of training ``tid`` (not rank 0)."""
    with session_scope(settings) as sess:
        return sess.execute(select(GangMember.id).where(
            GangMember.training_id == tid, GangMember.host_id == host_id, GangMember.node_rank > 0)
        ).first() is not None


def _await_rendezvous(store_settings: StoreSettings, worker_settings: WorkerSettings, tid: uuid.UUID, host_id: uuid.UUID
                      ) -> tuple[Training, GangMember, GangRendezvous] | None:
    deadline = time.monotonic() + worker_settings.rendezvous_timeout_s
    while time.monotonic() < deadline:
        with session_scope(store_settings) as sess:
            t = get_training(sess, tid)
            m = sess.execute(select(GangMember).where(GangMember.training_id == tid,
                                                      GangMember.host_id == host_id)).scalar_one_or_none()
            r = sess.get(GangRendezvous, tid)
            if t is None or m is None or t.status not in ("scheduled", "running"):
                return None
            if t.status == "running" and r is not None and r.attempt == t.attempt:
                if m.attempt == t.attempt and m.status != "reserved":
                    return None  # this attempt already has this host's ranks (a duplicate task)
                sess.expunge_all()
                return t, m, r
        time.sleep(0.2)
    return None


def _set_member(settings: StoreSettings, m: GangMember, attempt: int, **values: Any) -> bool:
    with write_session(settings) as sess:
        res = sess.execute(update(GangMember).where(GangMember.id == m.id, GangMember.attempt == attempt)
                           .values(**values).execution_options(synchronize_session=False))
        return rows_changed(res) == 1


def _join(settings: StoreSettings, t: Training, m: GangMember, worker_id: str) -> bool:
    """Take this host's place in the running attempt, once (a redelivered task finds it taken)."""
    with write_session(settings) as sess:
        res = sess.execute(update(GangMember).where(
            GangMember.id == m.id,
            (GangMember.attempt.is_(None)) | (GangMember.attempt != t.attempt) | (GangMember.status == "reserved"),
        ).values(status="running", attempt=t.attempt, worker_id=worker_id, heartbeat_at=utcnow(), message=None)
            .execution_options(synchronize_session=False))
        return rows_changed(res) == 1


def _local_devices(settings: StoreSettings, host_id: uuid.UUID, gpu_ids: list[int]) -> list[str]:
    with session_scope(settings) as sess:
        gpus = {g.index: g for g in sess.execute(select(GPU).where(GPU.host_id == host_id)).scalars()}
        return [f"{gpus[i].backend}:{gpus[i].backend_device_id}" for i in gpu_ids]


def _last_error(progress: Path) -> str | None:
    data = memberfs.read_regular(progress)  # the training's account's file: never through a link
    if data is None:
        return None
    lines = data.decode("utf-8", "replace").splitlines()
    for line in reversed(lines):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if rec.get("event") == "error" or rec.get("type") == "error":
            return str(rec.get("message"))[:500]
    return None


def run_follower(settings: Settings, tid: uuid.UUID, host_id: uuid.UUID, host_name: str, worker_id: str,
                 launch: Callable[..., tuple[subprocess.Popen, int]], run_dir: Path, checkpoint_dir: Path,
                 stopping: Callable[[], bool] = lambda: False) -> str:
    """This host's ranks of a training across hosts, for the running attempt; returns what happened."""
    found = _await_rendezvous(settings, settings, tid, host_id)
    if found is None:
        return "skipped"
    t, m, rdzv = found
    marker = marker_path(settings, tid, t.attempt)
    try:
        seen = marker.read_text()
    except OSError:
        seen = None
    if seen != rdzv.marker:
        why = (f"checkpoint root {settings.checkpoint_root} on host {host_name} is not shared with the rank-0 "
               f"host (marker {marker} {'differs' if seen else 'not found'}); give every host one shared "
               "checkpoint root")
        _join(settings, t, m, worker_id)
        _set_member(settings, m, t.attempt, status="failed", message=why)
        return "failed"
    if not _join(settings, t, m, worker_id):
        return "skipped"
    from gpufleet.engine.spec import LaunchSpec

    backend = device_backend(settings)
    devices = _local_devices(settings, host_id, list(m.gpu_ids))
    run_dir.mkdir(parents=True, exist_ok=True)
    progress = run_dir / f"progress-{t.attempt}-{host_name}.jsonl"
    memberfs.remove(progress)
    spec = LaunchSpec(recipe=t.recipe, config=dict(t.config), devices=devices, checkpoint_dir=str(checkpoint_dir),
                      progress_file=str(progress), data_root=str(settings.data_root), resume=True,
                      collective_timeout_s=settings.collective_timeout_s, training_id=str(tid),
                      ranks_on_cpu=backend.ranks_run_on_cpu(devices), stop_grace_s=settings.stop_grace_s,
                      attempt=t.attempt, gang=spec_gang(settings, t, rdzv, m.first_rank, master=False))
    spec_path = spec.write(run_dir / f"spec-{t.attempt}-{host_name}.json")
    logf = ShippedLog(settings, f"{tid}-{host_name}")
    logf.line(f"[gpufleet] attempt {t.attempt}: ranks {m.first_rank}-{m.first_rank + len(devices) - 1} of "
              f"{t.world_size} on host {host_name}; rendezvous {rdzv.address}:{rdzv.port}")
    try:
        proc, lifeline = launch(spec_path, logf, tid, env=launch_env(settings, settings, tid))
    except OSError as exc:
        _set_member(settings, m, t.attempt, status="failed", message=f"cannot start the launcher: {exc}")
        logf.close()
        return "failed"
    pgid = proc.pid
    procs.write_pidfile(settings, host_name, tid, pgid, worker_id)
    backend.training_started(list(m.gpu_ids), proc.pid, str(tid), t.memory_estimate)
    _set_member(settings, m, t.attempt, launcher_pid=proc.pid)
    stopped = _supervise(settings, tid, m, t.attempt, proc, pgid, logf, stopping)
    procs.stop_group(pgid, 0.0)
    code = proc.wait()
    os.close(lifeline)
    backend.training_ended(proc.pid)
    procs.remove_pidfile(settings, host_name, tid)
    logf.line(f"[gpufleet] {launcher_end(code, stopped)}")
    logf.close()
    if code == 0:
        status, message = "succeeded", None
    elif stopped:
        status, message = "stopped", stopped
    else:
        status, message = "failed", _last_error(progress) or f"its launcher {launcher_end(code)}"
    _set_member(settings, m, t.attempt, status=status, message=message)
    return status


def _supervise(settings: Settings, tid: uuid.UUID, m: GangMember, attempt: int, proc: subprocess.Popen,
               pgid: int, logf: BoundedLog, stopping: Callable[[], bool]) -> str | None:
    """Beat and watch until the launcher exits; returns why this host stopped it, if it did."""
    judge = LeaderJudge(settings, settings, tid, attempt)
    next_beat = 0.0
    asked: str | None = None
    while proc.poll() is None:
        time.sleep(0.1)
        if stopping() and asked is None:
            # Every rank agrees to stop at its next report and rank 0 checkpoints: the
            # whole gang goes back to the queue as interrupted.
            asked = "this host's worker is stopping"
            logf.line(f"[gpufleet] {asked}; asking every rank to checkpoint and stop")
            try:
                os.killpg(pgid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        if time.monotonic() < next_beat:
            continue
        next_beat = time.monotonic() + BEAT_S
        try:
            _set_member(settings, m, attempt, heartbeat_at=utcnow())
            why = judge.look()
        except Exception as exc:  # noqa: BLE001 - the database away: the same grace the rank-0 host's worker keeps
            why = judge.unreachable(exc)
        if why:
            logf.line(f"[gpufleet] {why}; stopping this host's ranks")
            procs.stop_group(pgid, STOP_GRACE_S)
            return why
    return asked


class LeaderJudge:
    """Whether this host's ranks should stop, from what the rank-0 host's worker wrote.

    The rank-0 host's lease is judged over time this host could reach the
    database (gpufleet.jobs.reach), as the scheduler judges it: after an
    outage both share, the lease looks lapsed by the wall clock until the
    rank-0 host renews, and that is not its worker stopping. The database
    away is waited out for ``GPUFLEET_DB_OUTAGE_GRACE_S``, as the rank-0
    host's worker waits it out, so an outage costs the gang nothing.
    """

    def __init__(self, store_settings: StoreSettings, worker_settings: WorkerSettings, tid: uuid.UUID, attempt: int):
        self.store_settings, self.worker_settings = store_settings, worker_settings
        self.tid, self.attempt = tid, attempt
        self.reach = Reach()
        self.last_ok = time.monotonic()
        self.ended_at: float | None = None

    def look(self) -> str | None:
        with session_scope(self.store_settings) as sess:
            row = sess.execute(select(Training.status, Training.attempt, Training.cancel_requested,
                                      Training.lease_expires_at).where(Training.id == self.tid)).first()
        now = self.reach.reached()
        self.last_ok = time.monotonic()
        if row is not None and row.status == "succeeded" and row.attempt == self.attempt:
            # Rank 0 is done, so every rank passed the last step: let this host's ranks end on their own.
            self.ended_at = self.ended_at or time.monotonic()
            if time.monotonic() - self.ended_at > END_GRACE_S:
                return (f"the training succeeded on the rank-0 host and this host's ranks were still "
                        f"running {END_GRACE_S:.0f}s later")
            return None
        if row is None or row.status != "running" or row.attempt != self.attempt:
            return "the training is no longer running this attempt"
        if row.cancel_requested:
            return "cancel requested"
        # As the scheduler's recovery counts it: a lease's whole term of reachable time since its last renewal
        # (and a moment), not reachable time since it lapsed. After an outage the lease lapsed long ago by the
        # wall clock, and the rank-0 host's worker gets its term to renew from the database's return; counted
        # from the lapse it had one second, which a loaded machine's worker, flushing the outage's progress,
        # missed, and this host stopped a gang that had lost nothing.
        lease = timedelta(seconds=self.worker_settings.lease_s)
        if row.lease_expires_at is not None and row.lease_expires_at < now and \
                self.reach.reachable_since(row.lease_expires_at - lease, now) > lease.total_seconds() + LEASE_GRACE_S:
            return "the rank-0 host's worker stopped renewing its lease"
        return None

    def unreachable(self, exc: Exception) -> str | None:
        self.reach.failed()
        away = time.monotonic() - self.last_ok
        if away > self.worker_settings.db_outage_grace_s:
            return (f"cannot reach the database ({type(exc).__name__}) for {away:.0f}s, longer than "
                    f"GPUFLEET_DB_OUTAGE_GRACE_S ({self.worker_settings.db_outage_grace_s:.0f}s)")
        return None
