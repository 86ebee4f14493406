"""The time a judge of leases could reach the database: a lease lapses only over that time.

A lease judged by the wall clock since its last renewal cannot tell a dead
worker from a database nobody could reach: after a 30 s PostgreSQL outage
every lease looked lapsed, and every running training was restarted though
its worker was alive. :class:`Reach` keeps the stretches of time during which
this process could *not* vouch for the database (its passes failed, it did
not lead, it had not started), and :meth:`Reach.reachable_since` counts the
rest: a worker's silence is held against it only while it could have spoken.

The worker keeps its ranks running through an outage for up to
``GPUFLEET_DB_OUTAGE_GRACE_S`` (jobs/watch.py) and stops them past it. An
outage everyone shares requeues nothing while it lasts, and the worker
renews as soon as the database is back. A worker cut off alone (a partition
the judge does not share) is judged after ``GPUFLEET_LEASE_S`` of reachable
time, as a dead one is; its attempt is fenced off by number from then on
(the row by ``attempt``, the checkpoints by ``fence.json``), and it stops its
ranks at its first renewal that finds the lease gone, or at the end of its
outage grace.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from gpufleet.db.types import utcnow

# Stretches older than this are forgotten: a renewal that old is long lapsed by any count.
KEEP = timedelta(hours=6)


class Reach:
    """The stretches this process could not vouch for the database, up to now."""

    def __init__(self) -> None:
        self.last_ok: datetime | None = None  # the last pass that reached the database
        self.blind = True  # since last_ok, a pass failed or none ran: that stretch counts as unreachable
        self.gaps: list[tuple[datetime | None, datetime]] = []  # (from, to); from None: since ever

    def failed(self) -> None:
        """A pass could not reach the database, or this process did not judge (another one leads)."""
        self.blind = True

    def reached(self, now: datetime | None = None) -> datetime:
        """A pass reached the database now; the stretch since the last one counts only if none failed."""
        now = now or utcnow()
        if self.blind:
            self.gaps.append((self.last_ok, now))
            self.blind = False
        self.last_ok = now
        self.gaps = [g for g in self.gaps if g[1] > now - KEEP]
        return now

    def unreachable_since(self, since: datetime, now: datetime, settle_s: float = 0.0) -> float:
        """Seconds between ``since`` and ``now`` this process could not vouch for the database; with
        ``settle_s``, the first seconds after each stretch count too (others reconnecting after an outage)."""
        out, counted = 0.0, since
        for start, end in self.gaps:  # oldest first, so a stretch stretched by settle_s is not counted twice
            settle = timedelta(seconds=settle_s if start is not None else 0.0)  # not after this process's start
            lo, hi = max(start or since, counted), min(end + settle, now)
            if hi > lo:
                out += (hi - lo).total_seconds()
                counted = hi
        return out

    def reachable_since(self, since: datetime, now: datetime, settle_s: float = 0.0) -> float:
        """Seconds between ``since`` and ``now`` during which this process could reach the database (less the
        first ``settle_s`` after each stretch it could not)."""
        return max(0.0, (now - since).total_seconds() - self.unreachable_since(since, now, settle_s))
