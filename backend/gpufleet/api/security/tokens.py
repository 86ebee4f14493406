"""API tokens and signed, expiring values (session cookies, WebSocket tickets).

Tokens are random 256-bit strings; only their SHA-256 is stored, so a leaked
database does not leak working tokens. A plain hash is enough here (unlike
passwords) because the token has full entropy: there is nothing to guess.

Session cookies and WebSocket tickets are stateless: a JSON payload signed with
HMAC-SHA256 under a key derived from ``GPUFLEET_SECRET_KEY`` and the value's
purpose, so a WebSocket ticket can never be replayed as a session cookie or the
other way round.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

TOKEN_PREFIX = "gf_"
# Long enough for a person to tell tokens apart in `gpufleet tokens list`,
# short enough to carry no useful part of the secret (3 + 7 of 43 characters).
PREFIX_LEN = 10


@dataclass(frozen=True)
class NewToken:
    """A token as created: the secret is shown once and never stored."""

    secret: str
    prefix: str
    token_hash: str


def hash_token(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def new_token() -> NewToken:
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    return NewToken(secret=secret, prefix=secret[:PREFIX_LEN], token_hash=hash_token(secret))


def looks_like_token(value: str) -> bool:
    # Cheap shape check so that garbage never reaches the database.
    return value.startswith(TOKEN_PREFIX) and 20 <= len(value) <= 128 and value.isascii()


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
