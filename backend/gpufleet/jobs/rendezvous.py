"""A training across hosts at run time: the rendezvous, every host's ranks, one fate.

The rank-0 host's worker claims the training as for one host (lease, metrics,
outcome: :mod:`gpufleet.jobs.supervisor`). Before it starts its launcher it
picks a free port, publishes ``address:port`` and the token of a marker file
under the checkpoint root in ``gang_rendezvous`` for this attempt, and sends
a Celery task to each other member host's queue. Its launcher opens the c10d
TCPStore on that port (:mod:`gpufleet.training.gang_launch`).

Every other member host's worker (:func:`run_follower`) waits for the
rendezvous of the running attempt, checks that it sees the marker (the
checkpoint root must be shared: rank 0 checkpoints there and every rank
resumes from it), starts its local ranks with their global ranks and beats
its ``gang_members`` row. It stops its ranks as soon as the training is no
longer running this attempt, is cancelled, or the rank-0 host's lease runs
out. The rank-0 host's worker (:class:`LeaderWatch`) stops its ranks as soon
as a member fails, stops beating, or does not join in time; the training is
then requeued (from rank 0's newest checkpoint) or failed, and the status and
the release of every host's GPUs are one transaction.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import delete, select, update

from gpufleet.config import Settings
from gpufleet.db.models import GPU, GangMember, GangRendezvous, Training
from gpufleet.db.session import session_scope, write_session
from gpufleet.db.types import utcnow
from gpufleet.devices.backend import device_backend
from gpufleet.jobs import procs
from gpufleet.jobs.log_shipper import ShippedLog
from gpufleet.jobs.logs import BoundedLog
from gpufleet.lifecycle import outcome
from gpufleet.lifecycle.transitions import get_training
from gpufleet.training import exitcodes
from gpufleet.trainings.environment import EnvPolicy, training_environment
from gpufleet.trainings.gang_view import rank_hosts

log = logging.getLogger(__name__)

# A member whose worker has not beaten for this long is lost: well inside the 15 s promise.
STALE_S = 5.0
BEAT_S = 0.5
# Past the end of the rank-0 host's lease before the other hosts stop their ranks.
LEASE_GRACE_S = 1.0
STOP_GRACE_S = 2.0


def members(settings: Settings, tid: uuid.UUID) -> list[GangMember]:
    with session_scope(settings) as sess:
        rows = list(sess.execute(select(GangMember).where(GangMember.training_id == tid)
                                 .order_by(GangMember.node_rank)).scalars())
        sess.expunge_all()
        return rows


def rank_hosts_of(settings: Settings, tid: uuid.UUID) -> list[str]:
    return rank_hosts(members(settings, tid))


def advertised_address(settings: Settings) -> str:
    """The address other hosts reach this one at: the setting, else this host's name resolved."""
    if settings.advertise_address:
        return settings.advertise_address
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("0.0.0.0", 0))  # noqa: S104 - the store listens on every interface
        return s.getsockname()[1]


def marker_path(settings: Settings, tid: uuid.UUID, attempt: int) -> Path:
    return Path(settings.checkpoint_root) / ".gpufleet-shared" / f"{tid}-{attempt}"  # type: ignore[arg-type]


def launch_env(settings: Settings, tid: uuid.UUID) -> dict[str, str]:
    """The launcher's environment: the allow-list, plus the NIC collectives use when one is set."""
    extra = {"PYTHONUNBUFFERED": "1", "GPUFLEET_TRAINING_ID": str(tid)}
    if settings.network_interface:
        extra.update(NCCL_SOCKET_IFNAME=settings.network_interface, GLOO_SOCKET_IFNAME=settings.network_interface)
    return training_environment(os.environ, EnvPolicy.of(settings), **extra)


def spec_gang(settings: Settings, t: Training, rdzv: GangRendezvous, first_rank: int, master: bool) -> dict:
    return {"world_size": t.world_size, "first_rank": first_rank, "master_addr": rdzv.address,
            "master_port": rdzv.port, "store_master": master, "rendezvous_timeout_s": settings.rendezvous_timeout_s}


# -- the rank-0 host -----------------------------------------------------------

def leader_prepare(settings: Settings, t: Training, worker_id: str) -> dict | None:
    """Publish this attempt's rendezvous; the launch spec's ``gang``, or None for a one-host training."""
    if t.gang is None:
        return None
    rows = members(settings, t.id)
    if len(rows) < 2:
        return None
    token = secrets.token_hex(16)
    marker = marker_path(settings, t.id, t.attempt)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(token)
    rdzv = GangRendezvous(training_id=t.id, attempt=t.attempt, address=advertised_address(settings),
                          port=_free_port(), marker=token, published_at=utcnow())
    with write_session(settings) as sess:
        sess.execute(delete(GangRendezvous).where(GangRendezvous.training_id == t.id))
        sess.add(rdzv)
        sess.execute(update(GangMember).where(GangMember.training_id == t.id, GangMember.node_rank == 0).values(
            status="running", attempt=t.attempt, worker_id=worker_id, heartbeat_at=utcnow(), message=None))
        sess.flush()
        gang = spec_gang(settings, t, rdzv, 0, master=True)
    from gpufleet.jobs.celery_app import send_training

    for m in rows[1:]:
        try:
            send_training(settings, t.id, m.host_name)
        except Exception:  # noqa: BLE001 - a host that never joins ends the attempt at the rendezvous timeout
            log.exception("could not send training %s to host %s", t.id, m.host_name)
    return gang


@dataclass
class Verdict:
    reason: str
    fatal: bool  # a fault that a retry cannot mend (the checkpoint root is not shared)


class LeaderWatch:
    """What the rank-0 host's supervisor asks at each poll: has any other host gone?"""

    def __init__(self, settings: Settings, t: Training):
        self.settings, self.t = settings, t
        self.started = time.monotonic()
        self.next_at = 0.0

    def check(self) -> Verdict | None:
        now_m = time.monotonic()
        if now_m < self.next_at:
            return None
        self.next_at = now_m + BEAT_S
        now = utcnow()
        with write_session(self.settings) as sess:
            sess.execute(update(GangMember).where(GangMember.training_id == self.t.id, GangMember.node_rank == 0,
                                                  GangMember.attempt == self.t.attempt).values(heartbeat_at=now))
            rows = list(sess.execute(select(GangMember).where(GangMember.training_id == self.t.id,
                                                              GangMember.node_rank > 0)).scalars())
        waited = now_m - self.started
        for m in rows:
            mine = m.attempt == self.t.attempt
            if mine and m.status == "failed":
                fatal = (m.message or "").startswith("checkpoint root")
                return Verdict(f"host {m.host_name}: {m.message or 'its ranks failed'}", fatal)
            if not mine or m.status == "reserved":
                if waited > self.settings.rendezvous_timeout_s:
                    return Verdict(f"host {m.host_name} did not join the rendezvous within "
                                   f"{self.settings.rendezvous_timeout_s:.0f}s (is its worker running?)", False)
                continue
            if m.status == "running" and m.heartbeat_at is not None and \
                    now - m.heartbeat_at > timedelta(seconds=STALE_S):
                return Verdict(f"the worker on host {m.host_name} stopped answering "
                               f"({(now - m.heartbeat_at).total_seconds():.0f}s without a heartbeat; killed or lost)",
                               False)
        return None


def gang_decision(verdict: Verdict, t: Training) -> outcome.Decision:
    """The end of an attempt that the rank-0 host stopped because another host went."""
    if verdict.fatal:
        return outcome.Decision("failed", verdict.reason)
    if t.restarts >= t.max_restarts:
        return outcome.Decision("failed", f"{verdict.reason}; gave up after {t.restarts} restart(s)")
    return outcome.Decision(
        "queued", f"{verdict.reason}; every host's ranks were stopped and the training is requeued to resume "
                  f"from rank 0's newest checkpoint (restart {t.restarts + 1} of {t.max_restarts})",
        retry_kind="gang", counts_restart=True)


def root_cause(watch: LeaderWatch, wait_s: float = 2.0) -> Verdict | None:
    """After the rank-0 host's ranks failed: the member host whose ranks failed first, if one says so
    within ``wait_s`` (its worker writes it as its launcher exits)."""
    deadline = time.monotonic() + wait_s
    while True:
        with session_scope(watch.settings) as sess:
            failed = sess.execute(select(GangMember.host_name, GangMember.message).where(
                GangMember.training_id == watch.t.id, GangMember.node_rank > 0,
                GangMember.attempt == watch.t.attempt, GangMember.status == "failed")).first()
        if failed is not None:
            fatal = (failed.message or "").startswith("checkpoint root")
            return Verdict(f"host {failed.host_name}: {failed.message or 'its ranks failed'}", fatal)
        if time.monotonic() > deadline:
            return None
        time.sleep(0.2)


# -- every other host ----------------------------------------------------------

def is_follower(settings: Settings, tid: uuid.UUID, host_id: uuid.UUID) -> bool:
    """Whether this host runs other ranks of training ``tid`` (not rank 0)."""
    with session_scope(settings) as sess:
        return sess.execute(select(GangMember.id).where(
            GangMember.training_id == tid, GangMember.host_id == host_id, GangMember.node_rank > 0)
        ).first() is not None


def _await_rendezvous(settings: Settings, tid: uuid.UUID, host_id: uuid.UUID
                      ) -> tuple[Training, GangMember, GangRendezvous] | None:
    deadline = time.monotonic() + settings.rendezvous_timeout_s
    while time.monotonic() < deadline:
        with session_scope(settings) as sess:
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


def _set_member(settings: Settings, m: GangMember, attempt: int, **values: Any) -> bool:
    with write_session(settings) as sess:
        res = sess.execute(update(GangMember).where(GangMember.id == m.id, GangMember.attempt == attempt)
                           .values(**values).execution_options(synchronize_session=False))
        return res.rowcount == 1


def _join(settings: Settings, t: Training, m: GangMember, worker_id: str) -> bool:
    """Take this host's place in the running attempt, once (a redelivered task finds it taken)."""
    with write_session(settings) as sess:
        res = sess.execute(update(GangMember).where(
            GangMember.id == m.id,
            (GangMember.attempt.is_(None)) | (GangMember.attempt != t.attempt) | (GangMember.status == "reserved"),
        ).values(status="running", attempt=t.attempt, worker_id=worker_id, heartbeat_at=utcnow(), message=None)
            .execution_options(synchronize_session=False))
        return res.rowcount == 1


def _local_devices(settings: Settings, host_id: uuid.UUID, gpu_ids: list[int]) -> list[str]:
    with session_scope(settings) as sess:
        gpus = {g.index: g for g in sess.execute(select(GPU).where(GPU.host_id == host_id)).scalars()}
        return [f"{gpus[i].backend}:{gpus[i].backend_device_id}" for i in gpu_ids]


def _last_error(progress: Path) -> str | None:
    try:
        lines = progress.read_text().splitlines()
    except OSError:
        return None
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
    found = _await_rendezvous(settings, tid, host_id)
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
    from gpufleet.training.spec import LaunchSpec

    backend = device_backend(settings)
    devices = _local_devices(settings, host_id, list(m.gpu_ids))
    run_dir.mkdir(parents=True, exist_ok=True)
    progress = run_dir / f"progress-{t.attempt}-{host_name}.jsonl"
    progress.unlink(missing_ok=True)
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
        proc, lifeline = launch(spec_path, logf, tid, env=launch_env(settings, tid))
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
    logf.line(f"[gpufleet] {exitcodes.ended(code)}")
    logf.close()
    if code == 0:
        status, message = "succeeded", None
    elif stopped:
        status, message = "stopped", stopped
    else:
        status, message = "failed", _last_error(progress) or f"its launcher {exitcodes.ended(code)}"
    _set_member(settings, m, t.attempt, status=status, message=message)
    return status


def _supervise(settings: Settings, tid: uuid.UUID, m: GangMember, attempt: int, proc: subprocess.Popen,
               pgid: int, logf: BoundedLog, stopping: Callable[[], bool]) -> str | None:
    """Beat and watch until the launcher exits; returns why this host stopped it, if it did."""
    last_ok = time.monotonic()
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
        why = None
        try:
            _set_member(settings, m, attempt, heartbeat_at=utcnow())
            with session_scope(settings) as sess:
                row = sess.execute(select(Training.status, Training.attempt, Training.cancel_requested,
                                          Training.lease_expires_at).where(Training.id == tid)).first()
            last_ok = time.monotonic()
            if row is None or row.status != "running" or row.attempt != attempt:
                why = "the training is no longer running this attempt"
            elif row.cancel_requested:
                why = "cancel requested"
            elif row.lease_expires_at is not None and \
                    row.lease_expires_at < utcnow() - timedelta(seconds=LEASE_GRACE_S):
                why = "the rank-0 host's worker stopped renewing its lease"
        except Exception as exc:  # noqa: BLE001 - a database blip; one that outlasts the lease stops the ranks
            if time.monotonic() - last_ok > settings.lease_s:
                why = f"cannot reach the database ({type(exc).__name__})"
        if why:
            logf.line(f"[gpufleet] {why}; stopping this host's ranks")
            procs.stop_group(pgid, STOP_GRACE_S)
            return why
    return asked
