"""Rate limits: per-user rate of creating trainings, the queued cap, failed sign-ins, single-use tickets.

Counters live in Redis when ``GPUFLEET_REDIS_URL`` is set, so that several API
processes share one budget per user; the embedded default keeps them in this
process, which is the only API process there is.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from fastapi import HTTPException
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpufleet.config import Settings

log = logging.getLogger(__name__)

# Guessing a token is hopeless (256 bits), but a bound on failed sign-ins tells a
# misbehaving client to stop. Only failures count, per source and per account the
# token was meant for: a valid sign-in is never refused for anyone's failures.
SIGN_IN_FAILURES_PER_MINUTE = 20  # per source
SIGN_IN_ACCOUNT_FAILURES_PER_MINUTE = 10  # per account the failed tokens were meant for


class Limiter(Protocol):
    def hit(self, key: str, limit: int, window_s: float) -> float | None:
        """Count one event; return None if within ``limit`` per ``window_s``, else seconds to wait."""

    def claim_once(self, key: str, ttl_s: float) -> bool:
        """True the first time ``key`` is claimed within ``ttl_s``, False after."""


class MemoryLimiter:
    """Sliding-window counters in this process; ``clock`` (seconds) is injectable for tests."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._events: dict[str, deque[float]] = {}
        self._claims: dict[str, float] = {}

    def hit(self, key: str, limit: int, window_s: float) -> float | None:
        now = self._clock()
        with self._lock:
            q = self._events.setdefault(key, deque())
            while q and q[0] <= now - window_s:
                q.popleft()
            if len(q) >= limit:
                return max(0.0, q[0] + window_s - now)
            q.append(now)
            return None

    def claim_once(self, key: str, ttl_s: float) -> bool:
        now = self._clock()
        with self._lock:
            if len(self._claims) > 10_000:
                self._claims = {k: t for k, t in self._claims.items() if t > now}
            if self._claims.get(key, 0.0) > now:
                return False
            self._claims[key] = now + ttl_s
            return True


# One sliding window in a sorted set (score: the event's time), checked and added to in one step.
# A fixed per-minute window let twice the limit through across a minute's edge.
_SLIDE = """
local key, now, window, limit = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
if redis.call('ZCARD', key) >= limit then
  local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  return tostring(tonumber(oldest[2]) + window - now)
end
redis.call('ZADD', key, now, ARGV[4])
redis.call('PEXPIRE', key, math.ceil(window * 1000))
return false
"""


class RedisLimiter:
    """Sliding-window counters in Redis, shared by every API process of a fleet.

    ``clock`` (wall seconds, the same in every process) is injectable for tests.
    """

    def __init__(self, url: str, clock: Callable[[], float] = time.time) -> None:
        import redis

        self._redis = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        self._slide = self._redis.register_script(_SLIDE)
        self._clock = clock

    def hit(self, key: str, limit: int, window_s: float) -> float | None:
        try:
            wait = self._slide(keys=[f"gpufleet:rl:{key}"],
                               args=[repr(self._clock()), repr(float(window_s)), limit, uuid.uuid4().hex])
        except Exception as exc:  # noqa: BLE001 - a limiter outage must not stop the API
            log.warning("rate limiter unavailable (%s); allowing the request", exc)
            return None
        return None if wait is None else max(0.0, float(wait))

    def claim_once(self, key: str, ttl_s: float) -> bool:
        try:
            return bool(self._redis.set(f"gpufleet:once:{key}", b"1", nx=True, ex=max(1, int(ttl_s))))
        except Exception as exc:  # noqa: BLE001 - refuse rather than allow a replay
            log.warning("cannot record a single-use ticket (%s); refusing it", exc)
            return False


def get_limiter(app: Any, settings: Settings) -> Limiter:
    limiter = getattr(app.state, "gpufleet_limiter", None)
    if limiter is None:
        limiter = RedisLimiter(settings.redis_url) if settings.redis_url else MemoryLimiter()
        app.state.gpufleet_limiter = limiter
    return limiter


def too_many(what: str, retry_after: float) -> HTTPException:
    wait = max(1, int(retry_after + 0.999))
    return HTTPException(429, f"{what}; try again in {wait} s", headers={"Retry-After": str(wait)})


def check_create_allowed(app: Any, settings: Settings, session: Session, user: Any, count: int = 1) -> None:
    """Refuse (429) ``count`` new trainings over the user's queued cap, or a request over the creation rate.

    The rate counts requests (a batch is one request); the cap counts trainings.
    """
    from gpufleet.db.models import Training

    queued = session.scalar(
        select(func.count()).select_from(Training).where(Training.owner == user.name, Training.status == "queued")
    ) or 0
    if queued + count > settings.max_queued_per_user:
        asked = "" if count == 1 else f"; this request adds {count}"
        raise HTTPException(
            429,
            f"user {user.name!r} has {queued} queued trainings and may have at most"
            f" {settings.max_queued_per_user} (GPUFLEET_MAX_QUEUED_PER_USER){asked};"
            " cancel some or wait for them to start",
            headers={"Retry-After": "60"},
        )
    retry = get_limiter(app, settings).hit(f"create:{user.name}", settings.create_rate_per_minute, 60.0)
    if retry is not None:
        raise too_many(
            f"user {user.name!r} sent {settings.create_rate_per_minute} creation requests in the last minute,"
            " the most allowed (GPUFLEET_CREATE_RATE_PER_MINUTE)",
            retry,
        )


def requested_count(raw_body: bytes) -> int:
    """How many trainings a create request asks for: its ``items`` (a batch), else one.

    The body is read again here (Starlette caches it) because the cap must be
    checked before the route creates anything; a body that does not parse is
    left for the route to refuse.
    """
    try:
        body = json.loads(raw_body) if raw_body else None
    except ValueError:
        return 1
    if isinstance(body, dict) and isinstance(body.get("items"), list):
        return max(1, len(body["items"]))
    return 1


def count_sign_in_failure(app: Any, settings: Settings, source: str, account: str | None) -> None:
    """Count one failed sign-in from ``source`` (the client's address, the forwarded one behind a trusted
    proxy) meant for ``account`` (if known); 429 once either has failed too often in the last minute."""
    limiter = get_limiter(app, settings)
    waits = [limiter.hit(f"sign-in-fail:source:{source}", SIGN_IN_FAILURES_PER_MINUTE, 60.0)]
    if account is not None:
        waits.append(limiter.hit(f"sign-in-fail:user:{account}", SIGN_IN_ACCOUNT_FAILURES_PER_MINUTE, 60.0))
    over = [w for w in waits if w is not None]
    if over:
        raise too_many(f"too many failed sign-ins from {source}" if waits[0] is not None else
                       f"too many failed sign-ins as {account}", max(over))
