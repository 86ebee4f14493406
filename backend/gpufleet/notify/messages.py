"""What a webhook receives: the body in its format, and the headers that sign it.

Every delivery carries ``X-Gpufleet-Event`` (the notification's name),
``X-Gpufleet-Delivery`` and ``Idempotency-Key`` (the same for every try of
one event to one hook: a receiver that saw it already can drop it),
``X-Gpufleet-Timestamp`` (Unix seconds of this try) and
``X-Gpufleet-Signature: sha256=<hex>``, the HMAC-SHA256 with the hook's secret
of ``<timestamp>.<body>``. A receiver recomputes it over the raw body and
refuses a timestamp far from its clock (:func:`verify`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from typing import Any

from gpufleet.workkinds import noun

WORDS = {
    "training_started": "started",
    "training_succeeded": "succeeded",
    "training_failed": "failed",
    "training_preempted": "was preempted",
    "session_ready": "is ready",
    "session_idle_warning": "is idle and will be stopped",
    "session_stopped": "stopped",
    "booking_starting": "starts soon",
    "booking_released": "was released",
    "test": "sent a test notification",
}


@dataclass(frozen=True)
class Notice:
    """One notification, whatever the format it is sent in: of a training (or session), or of a booking."""

    key: str  # the idempotency key
    event: str
    time: str
    training: dict[str, Any]  # id, name, owner, kind, status; {} for a booking's
    reason: str | None = None
    user: str | None = None
    data: dict[str, Any] | None = None
    booking: dict[str, Any] | None = None  # id, owner, kind, start, end, time_zone, gpu_count, gpus, reason

    def as_json(self) -> dict[str, Any]:
        out = {"id": self.key, "event": self.event, "time": self.time, "training": self.training,
               "reason": self.reason, "user": self.user, "data": self.data or {}}
        if self.booking is not None:
            out["booking"] = self.booking
        return out

    def as_text(self) -> str:
        if self.booking is not None:
            b = self.booking
            line = f"gpufleet: booking {str(b.get('id'))[:8]} of {b.get('owner')} {WORDS.get(self.event, self.event)}"
            return f"{line}: {self.reason}" if self.reason else line
        t = self.training
        what = noun(t.get("kind"))
        line = f"gpufleet: {what} {t.get('name')} ({str(t.get('id'))[:8]}) of {t.get('owner')} " \
               f"{WORDS.get(self.event, self.event)}"
        return f"{line}: {self.reason}" if self.reason else line


def body(notice: Notice, fmt: str) -> bytes:
    payload = {"text": notice.as_text()} if fmt == "slack" else notice.as_json()
    return json.dumps(payload, separators=(",", ":"), default=str).encode()


def signature(secret: str, timestamp: int, raw: bytes) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + raw, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def headers(notice: Notice, secret: str, raw: bytes, now: float | None = None) -> dict[str, str]:
    ts = int(time.time() if now is None else now)
    return {"Content-Type": "application/json", "User-Agent": "gpufleet-webhooks",
            "X-Gpufleet-Event": notice.event, "X-Gpufleet-Delivery": notice.key, "Idempotency-Key": notice.key,
            "X-Gpufleet-Timestamp": str(ts), "X-Gpufleet-Signature": signature(secret, ts, raw)}


def verify(secret: str, timestamp: str, raw: bytes, sig: str, tolerance_s: float = 300.0) -> bool:
    """What a receiver checks: the signature, and a timestamp within ``tolerance_s`` of now."""
    try:
        ts = int(timestamp)
    except ValueError:
        return False
    return abs(time.time() - ts) <= tolerance_s and hmac.compare_digest(signature(secret, ts, raw), sig)
