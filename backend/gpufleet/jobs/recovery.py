"""Trainings whose worker went away.

A running training's supervisor renews ``lease_expires_at`` about once a
second. When the lease runs out (worker killed, host lost) the training is
requeued to resume from its newest checkpoint, counting as a restart, or
fails once its restarts are spent. A training scheduled long ago that no
worker claimed has its task sent again; the claim makes a duplicate harmless.
A training whose send failed (the broker was down) is sent again at every
tick until it goes through, so it leaves within a tick of the broker's return.
"""

from __future__ import annotations

import logging
import sys
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select, update

from gpufleet.config import HostSettings, StoreSettings, WorkerSettings
from gpufleet.db.models import Host, Training
from gpufleet.db.session import session_scope, write_session
from gpufleet.db.types import utcnow
from gpufleet.jobs.reach import Reach
from gpufleet.lifecycle import places
from gpufleet.lifecycle.transitions import transition

log = logging.getLogger(__name__)

# Past the end of a lease before it counts as lost: its own worker has killed
# the attempt a margin before the end (jobs/watch.py FENCE_MARGIN_S), and
# this covers clocks of two hosts that differ a little.
LEASE_GRACE_S = 1.0


def worker_beat(store_settings: StoreSettings, host_settings: HostSettings) -> None:
    """This host's worker is alive: say so, and clear a loss recorded while it was away."""
    with write_session(store_settings) as sess:
        sess.execute(update(Host).where(Host.name == host_settings.host_name).values(
            worker_seen_at=utcnow(), worker_lost_at=None, worker_lost_reason=None))


def mark_worker_lost(settings: StoreSettings, host: str | uuid.UUID | None, reason: str) -> None:
    """The worker of ``host`` (name or id) was found lost: no work goes there until it beats again.

    The host's agent may keep its heartbeat fresh all along, and a dead
    worker's queue takes tasks that nobody runs: without this a gang would be
    placed straight back on it and wait out the rendezvous timeout.
    """
    if host is None:
        return
    where = Host.id == host if isinstance(host, uuid.UUID) else Host.name == host
    with write_session(settings) as sess:
        sess.execute(update(Host).where(where, Host.worker_lost_at.is_(None)).values(
            worker_lost_at=utcnow(), worker_lost_reason=reason[:500]))
    log.warning("host %s: its worker is lost (%s); no work goes there until it beats again", host, reason)


def recover_expired(store_settings: StoreSettings, worker_settings: WorkerSettings,
                    reach: Reach | None = None) -> list[tuple[uuid.UUID, str]]:
    """Requeue or fail running trainings with an expired lease; returns (id, new status).

    ``reach``: the time this judge could reach the database (the scheduler
    loop's); a lease lapses only after ``lease_s`` of that time without a
    renewal, so an outage nobody could renew through costs no training a
    restart. Without it every second since the renewal counts (a caller that
    has just reached the database and vouches for the time before).
    """
    now = utcnow() - timedelta(seconds=LEASE_GRACE_S)
    with session_scope(store_settings) as sess:
        rows = sess.execute(
            select(Training.id, Training.restarts, Training.max_restarts, Training.auto_select,
                   Training.cancel_requested, Training.cancel_as, Host.name, Training.lease_expires_at)
            .join(Host, Host.id == Training.host_id, isouter=True)
            .where(Training.status == "running", Training.lease_expires_at < now,
                   places.team_placed())  # a pool job's end is its pool's word (gpufleet.jobs.pool_watch)
        ).all()
    if reach is not None:
        now = reach.reached() - timedelta(seconds=LEASE_GRACE_S)
    out = []
    for tid, restarts, max_restarts, auto, cancel, cancel_as, host_name, expires in rows:
        if expires is None:  # the statement reads only leases that expired
            continue
        renewed = expires - timedelta(seconds=worker_settings.lease_s)
        if reach is not None and reach.reachable_since(renewed, now) <= worker_settings.lease_s:
            continue  # silent only while the database could not be reached (by this judge, at least)
        where = [Training.lease_expires_at <= expires]  # a renewal that lands first wins
        why = f"the worker on host {host_name} stopped renewing its lease (killed, or the host is lost)"
        if reach is not None and (away := reach.unreachable_since(renewed, now)) >= 1:
            why += f"; {worker_settings.lease_s:.0f}s without a renewal while the database could be reached, besides " \
                   f"{away:.0f}s it could not"
        with write_session(store_settings) as sess:
            if cancel:
                # Cancelled while its worker was gone: nobody is left to stop, so it ends here.
                status = cancel_as or "cancelled"  # "pruned": its sweep stopped it at a rung
                ok = transition(sess, tid, ["running"], status, kind="cancel", extra_where=where,
                                reason=f"{status}; {why}", cancel_requested=False)
            elif restarts >= max_restarts:
                ok = transition(sess, tid, ["running"], "failed", extra_where=where,
                                reason=f"{why}; gave up after {restarts} restart(s)")
                status = "failed"
            else:
                values: dict[str, Any] = {"restarts": Training.restarts + 1, "lease_owner": None,
                                          "lease_expires_at": None, "launcher_pid": None}
                if auto:
                    values.update(gpu_ids=None, host_id=None)
                ok = transition(sess, tid, ["running"], "queued", kind="retry", extra_where=where,
                                reason=f"{why}; requeued to resume from the newest checkpoint "
                                       f"(restart {restarts + 1} of {max_restarts})",
                                data={"retry_kind": "lease", "host": host_name}, **values)
                status = "queued"
        if ok:
            log.warning("training %s: lease expired on host %s -> %s", tid, host_name, status)
            mark_worker_lost(store_settings, host_name, why)
            out.append((tid, status))
    return out


# Last re-send per training, in this process: the row keeps its own
# scheduled_at so that "scheduled long ago" stays measurable.
_LAST_SENT: dict[uuid.UUID, datetime] = {}
# Trainings whose send failed in this process, and their host. Only the
# scheduler loop's thread touches it.
_UNSENT: dict[uuid.UUID, str] = {}


def note_unsent(tid: uuid.UUID, host_name: str) -> None:
    """Remember a training whose task could not be sent; :func:`resend_unsent` tries again."""
    _UNSENT[tid] = host_name


def resend_unsent(settings: StoreSettings, send: Callable[[uuid.UUID, str], None]) -> list[uuid.UUID]:
    """Send the trainings whose send failed, while they are still scheduled; stop at the first failure."""
    if not _UNSENT:
        return []
    with session_scope(settings) as sess:
        still = dict(sess.execute(
            select(Training.id, Host.name).join(Host, Host.id == Training.host_id)
            .where(Training.id.in_(list(_UNSENT)), Training.status == "scheduled")
        ).all())
    sent = []
    for tid in list(_UNSENT):
        host_name = still.get(tid)
        if host_name is None:  # claimed, cancelled or requeued meanwhile
            _UNSENT.pop(tid, None)
            continue
        try:
            send(tid, host_name)
        except Exception:  # still down; the first failure was logged
            log.debug("broker still unreachable; training %s waits to be sent", tid, exc_info=True)
            break
        _UNSENT.pop(tid, None)
        _LAST_SENT[tid] = utcnow()
        sent.append(tid)
    if sent:
        log.info("sent %d training(s) that waited for the broker", len(sent))
    return sent


def resend_stale(store_settings: StoreSettings, worker_settings: WorkerSettings,
                 send: Callable[[uuid.UUID, str], None]) -> list[uuid.UUID]:
    """Send the task again for trainings scheduled long ago and never claimed.

    One whose host has not been seen (agent heartbeat) for a long while goes
    back to the queue instead, releasing its GPUs: a lost host must not hold
    a reservation forever.
    """
    now = utcnow()
    every = timedelta(seconds=max(4 * worker_settings.lease_s, 10))
    give_up = timedelta(seconds=max(20 * worker_settings.lease_s, 120))
    with session_scope(store_settings) as sess:
        rows = sess.execute(
            select(Training.id, Training.scheduled_at, Training.auto_select, Host.name, Host.last_heartbeat)
            .join(Host, Host.id == Training.host_id)
            .where(Training.status == "scheduled", Training.scheduled_at < now - every)
        ).all()
    sent = []
    for tid, scheduled_at, auto, host_name, heartbeat in rows:
        if scheduled_at is None:  # the statement reads only trainings scheduled a while ago
            continue
        if scheduled_at < now - give_up and (heartbeat is None or heartbeat < now - give_up):
            cleared: dict[str, Any] = {"gpu_ids": None, "host_id": None} if auto else {}
            with write_session(store_settings) as sess:
                transition(sess, tid, ["scheduled"], "queued", kind="retry",
                           reason=f"host {host_name} has not been seen for {give_up.total_seconds():.0f}s and "
                                  "did not start the training; back to the queue",
                           data={"retry_kind": "host_lost", "host": host_name}, **cleared)
            _LAST_SENT.pop(tid, None)
            continue
        if _LAST_SENT.get(tid, scheduled_at) > now - every:
            continue
        try:
            send(tid, host_name)
            _LAST_SENT[tid] = now
            sent.append(tid)
        except Exception:  # noqa: BLE001 - the broker may be down; sent again once it is back
            log.warning("could not re-send training %s to host %s: %s", tid, host_name, _first_line(sys.exc_info()[1]))
            note_unsent(tid, host_name)
    for tid in [t for t, when in _LAST_SENT.items() if when < now - 2 * give_up]:
        _LAST_SENT.pop(tid, None)
    return sent


def _first_line(exc: BaseException | None) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
