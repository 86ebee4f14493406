"""Fair-share queue order: priority, then each owner's recent usage against their share, then age.

The factor is Slurm's classic fair-share factor::

    F = 2 ** (-U / S)

where ``U`` is the owner's share of the recent usage of everyone competing
(decayed GPU-seconds held, each second weighted by ``2 ** (-age /
half_life)``) and ``S`` is the owner's share of the shares of everyone
competing (``quotas.share``, 1 unless an admin sets it). Someone who used
nothing lately has F = 1; someone who used exactly their share has F = 0.5;
more use, lower F. Competing means having a queued training or recent usage.

Within one priority the queue is ordered by F, highest first, then by age, so
an owner who has had less than their share recently goes ahead, and an owner
alone in the queue keeps the plain priority-then-age order.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from gpufleet.config import SchedulerSettings, StoreSettings
from gpufleet.db.models import GPUAllocation, Training
from gpufleet.db.session import session_scope
from gpufleet.db.types import utcnow
from gpufleet.users.groups import DEFAULT_SHARE, user_quotas

# Allocations released more than this many half-lives ago weigh under 2**-20: left out.
HORIZON_HALF_LIVES = 20
# Decayed usage changes slowly (a week's half-life by default): a pass reuses the last
# answer for up to this long, or a fiftieth of the half-life if that is shorter.
USAGE_CACHE_S = 30.0
_cache: dict[tuple[str, float], tuple[float, dict[str, float]]] = {}
_cache_lock = threading.Lock()


def decayed_usage(sess: Session, half_life_s: float, now: datetime) -> dict[str, float]:
    """Owner -> GPU-seconds held, each weighted by 2**(-age / half_life)."""
    since = now - timedelta(seconds=half_life_s * HORIZON_HALF_LIVES)
    rows = sess.execute(
        select(Training.owner, GPUAllocation.allocated_at, GPUAllocation.released_at)
        .join(Training, Training.id == GPUAllocation.training_id)
        .where(or_(GPUAllocation.released_at.is_(None), GPUAllocation.released_at > since))
    )
    rate = math.log(2) / half_life_s
    out: dict[str, float] = {}
    for owner, start, end in rows:
        a = max(0.0, (now - start).total_seconds())
        b = max(0.0, (now - (end or now)).total_seconds())
        # The integral of 2**(-age/H) over ages b..a.
        out[owner] = out.get(owner, 0.0) + (math.exp(-rate * b) - math.exp(-rate * a)) / rate
    return out


def factors(usage: dict[str, float], shares: dict[str, float], owners: Iterable[str]) -> dict[str, float]:
    """Owner -> fair-share factor in (0, 1], for every owner in ``owners`` or ``usage``."""
    competing = set(owners) | {o for o, u in usage.items() if u > 0}
    total_usage = sum(usage.get(o, 0.0) for o in competing)
    total_share = sum(shares.get(o, DEFAULT_SHARE) for o in competing) or 1.0
    out = {}
    for o in competing:
        u = usage.get(o, 0.0) / total_usage if total_usage > 0 else 0.0
        s = shares.get(o, DEFAULT_SHARE) / total_share
        out[o] = 2.0 ** (-u / s)
    return out


def _recent_usage(sess: Session, scheduler_settings: SchedulerSettings, store_settings: StoreSettings,
                  now: datetime | None) -> dict[str, float]:
    half_life = scheduler_settings.fair_share_half_life_h * 3600.0
    if now is not None:
        return decayed_usage(sess, half_life, now)
    key = (store_settings.effective_database_url, half_life)
    with _cache_lock:
        hit = _cache.get(key)
    if hit is not None and time.monotonic() - hit[0] < min(USAGE_CACHE_S, half_life / 50):
        return hit[1]
    usage = decayed_usage(sess, half_life, utcnow())
    with _cache_lock:
        _cache[key] = (time.monotonic(), usage)
    return usage


def owner_factors(sess: Session, scheduler_settings: SchedulerSettings, store_settings: StoreSettings,
                  owners: Iterable[str], now: datetime | None = None) -> dict[str, float]:
    usage = _recent_usage(sess, scheduler_settings, store_settings, now)
    shares = {name: q.share for name, q in user_quotas(sess).items()}
    return factors(usage, shares, owners)


def over_share(sess: Session, scheduler_settings: SchedulerSettings, store_settings: StoreSettings,
               owners: Iterable[str]) -> dict[str, float]:
    """Owner -> how far their recent usage is over their share: U/S - 1, or 0 at or under it.

    The order in which preemption picks victims of equal priority (furthest
    over first); empty with fair share off.
    """
    if not scheduler_settings.fair_share:
        return {}
    f = owner_factors(sess, scheduler_settings, store_settings, owners)
    # F = 2**(-U/S), so U/S = -log2(F); F is never 0 (U/S is finite).
    return {o: max(0.0, -math.log2(v) - 1.0) for o, v in f.items() if v > 0}


def order(rows: list[Training], f: dict[str, float]) -> list[Training]:
    """Priority (highest first), then fair-share factor (highest first), then age."""
    return sorted(rows, key=lambda t: (-t.priority, -f.get(t.owner, 1.0), t.created_at, t.id))


def in_order(scheduler_settings: SchedulerSettings, store_settings: StoreSettings,
             pages: Iterator[list[Training]]) -> Iterator[Training]:
    """The scheduler's queue in fair-share order; the whole queue is read before the first is placed."""
    if not scheduler_settings.fair_share:
        for page in pages:
            yield from page
        return
    rows = [t for page in pages for t in page]
    if len({t.owner for t in rows}) < 2:
        yield from rows
        return
    with session_scope(store_settings) as sess:
        f = owner_factors(sess, scheduler_settings, store_settings, {t.owner for t in rows})
    yield from order(rows, f)
