"""A training across hosts at run time: the rendezvous, every host's ranks, one fate.

The rank-0 host's worker claims the training as for one host (lease, metrics,
outcome: :mod:`gpufleet.jobs.supervisor`). Before it starts its launcher it
picks a free port, publishes ``address:port`` and the token of a marker file
under the checkpoint root in ``gang_rendezvous`` for this attempt, and sends
a Celery task to each other member host's queue. Its launcher opens the c10d
TCPStore on that port (:mod:`gpufleet.engine.gang_launch`).

Every other member host's worker (:func:`gpufleet.jobs.gang_member.run_follower`)
waits for the rendezvous of the running attempt, checks that it sees the marker (the
checkpoint root must be shared: rank 0 checkpoints there and every rank
resumes from it), starts its local ranks with their global ranks and beats
its ``gang_members`` row. It stops its ranks as soon as the training is no
longer running this attempt, is cancelled, or the rank-0 host's lease runs
out. The rank-0 host's worker (:class:`LeaderWatch`) stops its ranks as soon
as a member fails, stops beating, or cannot join (its host's worker is lost:
then the retry uses no restart, and the host is left out until its worker
beats again), or does not join in time; the training is then requeued (from rank 0's newest checkpoint) or
failed, and the status and the release of every host's GPUs are one transaction.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sqlalchemy import delete, select, update

from gpufleet.config import CodeSettings, HostSettings, Settings, StoreSettings, WorkerSettings
from gpufleet.db.models import GangMember, GangRendezvous, Host, Training
from gpufleet.db.session import session_scope, write_session
from gpufleet.db.types import utcnow
from gpufleet.jobs import recovery
from gpufleet.jobs.reach import Reach
from gpufleet.lifecycle import outcome
from gpufleet.trainings.environment import EnvPolicy, training_environment
from gpufleet.trainings.gang_view import rank_hosts

log = logging.getLogger(__name__)

# A member whose worker has not beaten for this long is lost: well inside the 15 s promise.
STALE_S = 5.0
# A member seen joining this long after the rank-0 host's start joined late, when the ranks then time out.
LATE_S = 30.0
BEAT_S = 0.5


def members(settings: StoreSettings, tid: uuid.UUID) -> list[GangMember]:
    with session_scope(settings) as sess:
        rows = list(sess.execute(select(GangMember).where(GangMember.training_id == tid)
                                 .order_by(GangMember.node_rank)).scalars())
        sess.expunge_all()
        return rows


def rank_hosts_of(settings: StoreSettings, tid: uuid.UUID) -> list[str]:
    return rank_hosts(members(settings, tid))


def advertised_address(settings: HostSettings) -> str:
    """The address other hosts reach this one at: the setting, else this host's name resolved."""
    if settings.advertise_address:
        return settings.advertise_address
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("0.0.0.0", 0))  # the store listens on every interface
        return s.getsockname()[1]


def marker_path(settings: WorkerSettings, tid: uuid.UUID, attempt: int) -> Path:
    return Path(settings.checkpoint_root) / ".gpufleet-shared" / f"{tid}-{attempt}"  # type: ignore[arg-type]


def launch_env(host_settings: HostSettings, code_settings: CodeSettings, tid: uuid.UUID) -> dict[str, str]:
    """The launcher's environment: the allow-list, plus the NIC collectives use when one is set."""
    extra = {"PYTHONUNBUFFERED": "1", "GPUFLEET_TRAINING_ID": str(tid)}
    if host_settings.network_interface:
        extra.update(NCCL_SOCKET_IFNAME=host_settings.network_interface,
                     GLOO_SOCKET_IFNAME=host_settings.network_interface)
    return training_environment(os.environ, EnvPolicy.of(code_settings), **extra)


def spec_gang(settings: WorkerSettings, t: Training, rdzv: GangRendezvous, first_rank: int, master: bool) -> dict:
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
        except Exception:  # a host that never joins ends the attempt at the rendezvous timeout
            log.exception("could not send training %s to host %s", t.id, m.host_name)
    return gang


@dataclass
class Verdict:
    reason: str
    fatal: bool  # a fault that a retry cannot mend (the checkpoint root is not shared)
    # False when a member's host lost its worker before it joined: the gang never ran, so the
    # retry uses none of the training's restarts.
    counts: bool = True


class LeaderWatch:
    """What the rank-0 host's supervisor asks at each poll: has any other host gone?"""

    def __init__(self, store_settings: StoreSettings, worker_settings: WorkerSettings, t: Training):
        self.store_settings, self.worker_settings, self.t = store_settings, worker_settings, t
        self.started = time.monotonic()
        self.next_at = 0.0
        self.joined: dict[str, float] = {}  # member host -> seconds after this host's start it was seen joined
        # The other hosts' beats are judged over time this host could reach the database (gpufleet.jobs.reach):
        # after an outage every beat looks stale by the wall clock, and no host stopped.
        self.reach = Reach()

    def check(self) -> Verdict | None:
        now_m = time.monotonic()
        if now_m < self.next_at:
            return None
        self.next_at = now_m + BEAT_S
        try:
            with write_session(self.store_settings) as sess:
                sess.execute(update(GangMember).where(
                    GangMember.training_id == self.t.id, GangMember.node_rank == 0,
                    GangMember.attempt == self.t.attempt).values(heartbeat_at=utcnow()))
        except Exception:
            self.reach.failed()
            raise
        self.reach.reached()
        waited = now_m - self.started
        for m, host in self._others():
            mine = m.attempt == self.t.attempt
            if mine and m.status != "reserved":
                self.joined.setdefault(m.host_name, waited)
            if mine and m.status == "failed":
                fatal = (m.message or "").startswith("checkpoint root")
                return Verdict(f"host {m.host_name}: {m.message or 'its ranks failed'}", fatal)
            if (lost := self.lost(m, host)) is not None:
                return lost
            if (not mine or m.status == "reserved") and waited > self.worker_settings.rendezvous_timeout_s:
                return Verdict(f"host {m.host_name} did not join the rendezvous within "
                               f"{self.worker_settings.rendezvous_timeout_s:.0f}s (is its worker running?)", False)
        return None

    def _others(self) -> list[tuple[GangMember, Host | None]]:
        with session_scope(self.store_settings) as sess:
            rows = sess.execute(select(GangMember, Host).join(Host, Host.id == GangMember.host_id, isouter=True)
                                .where(GangMember.training_id == self.t.id, GangMember.node_rank > 0)).all()
            sess.expunge_all()
        return [(m, h) for m, h in rows]

    def lost(self, m: GangMember, host: Host | None) -> Verdict | None:
        """Whether member ``m``'s worker is gone, and why; it is then marked lost, so that no work goes to its
        host until it beats again. A member that never joined this attempt costs the gang no restart: a
        gang never waits on a member that cannot join."""
        now = utcnow()

        def silent(since: datetime | None) -> float:  # seconds of reachable time without a word
            # After an outage this host shared, the member's worker gets a lease's term to reconnect and beat
            # before its silence counts: the stretch is everyone's, and a loaded worker reconnects slowly.
            return self.reach.reachable_since(since, now, settle_s=self.worker_settings.lease_s) \
                if since is not None and since < now else 0.0

        joined = m.attempt == self.t.attempt and m.status != "reserved"
        if host is not None and host.worker_lost_at is not None:
            why = f"the worker on host {m.host_name} is lost ({host.worker_lost_reason or 'no beat'})"
        elif host is not None and silent(host.worker_seen_at) > STALE_S:
            why = (f"the worker on host {m.host_name} stopped beating "
                   f"({silent(host.worker_seen_at):.0f}s without a beat; killed or lost)")
        elif joined and m.status == "running" and silent(m.heartbeat_at) > STALE_S:
            why = (f"the worker on host {m.host_name} stopped answering "
                   f"({silent(m.heartbeat_at):.0f}s without a heartbeat; killed or lost)")
        else:
            return None
        recovery.mark_worker_lost(self.store_settings, m.host_id, why)
        if joined:
            return Verdict(why, False)
        return Verdict(f"host {m.host_name} cannot join: {why}; the gang is placed again without it", False,
                       counts=False)

    def late(self) -> Verdict | None:
        """After the rank-0 host's ranks timed out: a member that had not joined, or joined late (``LATE_S``
        after this host started), is what they waited for. A host's fault, so it costs a restart as one
        (``gang_decision``), never one "with a longer collective timeout"."""
        timeout = f"GPUFLEET_RENDEZVOUS_TIMEOUT_S is {self.worker_settings.rendezvous_timeout_s:.0f}s"
        for m, _host in self._others():
            if m.attempt != self.t.attempt or m.status == "reserved":
                return Verdict(f"host {m.host_name} had not joined the rendezvous when the other hosts' ranks "
                               f"timed out waiting for it ({time.monotonic() - self.started:.0f}s; {timeout})", False)
        name, after = max(self.joined.items(), key=lambda kv: kv[1], default=("", 0.0))
        if after < LATE_S:
            return None
        return Verdict(f"host {name} joined the rendezvous late ({after:.0f}s after rank 0's host started; "
                       f"{timeout}) and the ranks timed out waiting for it", False)

    def absent(self, wait_s: float = STALE_S + 2 * BEAT_S) -> Verdict | None:
        """After the rank-0 host's launcher failed with no member saying why: a member whose worker is gone
        (its ranks died with it, and this host's ranks lost their peers), once that shows, within ``wait_s``."""
        deadline = time.monotonic() + wait_s
        while True:
            for m, host in self._others():
                if (lost := self.lost(m, host)) is not None:
                    return lost
            if time.monotonic() > deadline:
                return None
            time.sleep(BEAT_S)


def gang_decision(verdict: Verdict, t: Training) -> outcome.Decision:
    """The end of an attempt that the rank-0 host stopped because another host went."""
    if verdict.fatal:
        return outcome.Decision("failed", verdict.reason)
    if not verdict.counts:
        return outcome.Decision(
            "queued", f"{verdict.reason}; requeued to resume from rank 0's newest checkpoint, using none of its "
                      f"restarts ({t.restarts} of {t.max_restarts} used)", retry_kind="gang_member_lost")
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
        with session_scope(watch.store_settings) as sess:
            failed = sess.execute(select(GangMember.host_name, GangMember.message).where(
                GangMember.training_id == watch.t.id, GangMember.node_rank > 0,
                GangMember.attempt == watch.t.attempt, GangMember.status == "failed")).first()
        if failed is not None:
            fatal = (failed.message or "").startswith("checkpoint root")
            return Verdict(f"host {failed.host_name}: {failed.message or 'its ranks failed'}", fatal)
        if time.monotonic() > deadline:
            return None
        time.sleep(0.2)
