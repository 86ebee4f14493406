"""A user's idempotency keys, stored: claim a key for a request, keep its answer, or let it go.

The rules (Stripe's, and the IETF draft "The Idempotency-Key HTTP Header
Field"): within the window, the same key and the same request get the first
answer again; the same key with another request body is a conflict. Only a
success is kept: a refused request wrote nothing, so sending it again is safe
and runs it again. A claim whose request never finished (its server died
mid-way) is taken over once it is older than ``STALE_CLAIM_S`` (10 minutes).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError

from gpufleet.config import StoreSettings
from gpufleet.db.idempotency import IdempotencyKey
from gpufleet.db.session import rows_changed, session_scope, write_session
from gpufleet.db.types import utcnow

# How long a key answers a retry with the first answer: Stripe's 24 hours.
WINDOW_S = 24 * 3600.0
# A claim this old belongs to a request that will never answer (its process died mid-way): a create
# takes seconds, a first one under load (its memory estimate traced cold) a minute or two. Until
# then a retry is told to come back, never run beside a first try that is merely slow.
STALE_CLAIM_S = 600.0


@dataclass(frozen=True)
class Claim:
    """What a request with a key finds: ``new`` (run it), ``done`` (the stored answer), ``running``
    (the first one is still at work) or ``conflict`` (the key was used with another body)."""

    state: str
    status_code: int | None = None
    response: Any = None


def claim(settings: StoreSettings, owner: str, endpoint: str, key: str, fingerprint: str) -> Claim:
    now = utcnow()
    window = timedelta(seconds=WINDOW_S)
    with write_session(settings) as sess:
        # Past the window a key is free again; a claim left by a request that never finished too.
        sess.execute(delete(IdempotencyKey).where(
            IdempotencyKey.owner == owner, IdempotencyKey.endpoint == endpoint, IdempotencyKey.key == key,
            (IdempotencyKey.created_at < now - window)
            | (IdempotencyKey.status_code.is_(None)
               & (IdempotencyKey.created_at < now - timedelta(seconds=STALE_CLAIM_S)))))
    try:
        with write_session(settings) as sess:
            sess.add(IdempotencyKey(owner=owner, endpoint=endpoint, key=key, fingerprint=fingerprint,
                                    created_at=now))
        return Claim("new")
    except IntegrityError:
        pass  # another request holds this key
    with session_scope(settings) as sess:
        row = sess.execute(select(IdempotencyKey).where(
            IdempotencyKey.owner == owner, IdempotencyKey.endpoint == endpoint, IdempotencyKey.key == key)
        ).scalar_one_or_none()
        if row is None:  # it was let go meanwhile: try once more
            return claim(settings, owner, endpoint, key, fingerprint)
        if row.fingerprint != fingerprint:
            return Claim("conflict")
        if row.status_code is None:
            return Claim("running")
        return Claim("done", row.status_code, row.response)


def keep(settings: StoreSettings, owner: str, endpoint: str, key: str, status_code: int, response: Any) -> None:
    """The first request succeeded: its answer is what a retry gets."""
    with write_session(settings) as sess:
        sess.execute(update(IdempotencyKey).where(
            IdempotencyKey.owner == owner, IdempotencyKey.endpoint == endpoint, IdempotencyKey.key == key,
            IdempotencyKey.status_code.is_(None),
        ).values(status_code=status_code, response=response, completed_at=utcnow()))


def release(settings: StoreSettings, owner: str, endpoint: str, key: str) -> None:
    """The first request was refused or failed: nothing was created, and the key may run again."""
    with write_session(settings) as sess:
        sess.execute(delete(IdempotencyKey).where(
            IdempotencyKey.owner == owner, IdempotencyKey.endpoint == endpoint, IdempotencyKey.key == key,
            IdempotencyKey.status_code.is_(None)))


def forget_expired(settings: StoreSettings) -> int:
    """Delete keys past the window (the retention loop calls it); how many."""
    cutoff = utcnow() - timedelta(seconds=WINDOW_S)
    with write_session(settings) as sess:
        return rows_changed(sess.execute(delete(IdempotencyKey).where(IdempotencyKey.created_at < cutoff)))
