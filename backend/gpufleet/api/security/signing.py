"""Signed, expiring values: the dashboard's session cookie and WebSocket tickets.

Both are stateless: a JSON payload signed with HMAC-SHA256 under a key derived
from ``GPUFLEET_SECRET_KEY`` and the value's purpose, so a WebSocket ticket can
never be replayed as a session cookie or the other way round.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Any


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _key(secret_key: str, purpose: str) -> bytes:
    return hmac.new(secret_key.encode("utf-8"), b"gpufleet/" + purpose.encode(), hashlib.sha256).digest()


def sign(secret_key: str, purpose: str, payload: dict[str, Any], ttl_s: float) -> str:
    """A compact ``v1.<payload>.<signature>`` string that expires after ``ttl_s``."""
    body = dict(payload, exp=int(time.time() + ttl_s))
    raw = _b64(json.dumps(body, separators=(",", ":"), sort_keys=True).encode("utf-8"))
    sig = _b64(hmac.new(_key(secret_key, purpose), raw.encode("ascii"), hashlib.sha256).digest())
    return f"v1.{raw}.{sig}"


def unsign(secret_key: str, purpose: str, value: str, now: float | None = None) -> dict[str, Any] | None:
    """The payload of a value made by :func:`sign`, or None if forged, altered or expired."""
    if not value or len(value) > 2048:
        return None
    parts = value.split(".")
    if len(parts) != 3 or parts[0] != "v1":
        return None
    _, raw, sig = parts
    try:
        expected = _b64(hmac.new(_key(secret_key, purpose), raw.encode("ascii"), hashlib.sha256).digest())
    except UnicodeEncodeError:
        return None
    if not hmac.compare_digest(expected, sig):
        return None
    try:
        body = json.loads(_unb64(raw))
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(body, dict) or not isinstance(body.get("exp"), int):
        return None
    if body["exp"] < (time.time() if now is None else now):
        return None
    return body
