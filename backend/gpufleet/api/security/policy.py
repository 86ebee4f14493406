"""What the configuration demands of a server: whether sign-in is required, and whether it is safe to serve.

``gpufleet serve`` refuses, before it binds, a configuration that would
expose an open server to the network or sign sessions with a guessable secret.
"""

from __future__ import annotations

import math
from collections import Counter

from gpufleet.api.security.origins import normalise_origin
from gpufleet.config import DEFAULT_SECRET, ConfigError, Settings

MIN_SECRET_LEN = 32
# Lower bounds on what the secret's text shows (see secret_strength): a random
# 32-character hex string shows about 100 bits; 32 x "a" shows none.
MIN_SECRET_BITS = 80
MIN_SECRET_DISTINCT = 8


def auth_required(settings: Settings) -> bool:
    """Whether every TCP request must prove who it is.

    Yes unless ``GPUFLEET_AUTH=off``, the explicit single-user mode of a
    personal workstation, where a loopback caller is the implicit admin
    ``local``; ``off`` is accepted only on loopback (see
    :func:`check_serve_safety`). Callers on the Unix socket are known by their
    account either way.
    """
    return settings.auth != "off"


def secret_strength(secret: str) -> float:
    """Bits of entropy the text of ``secret`` shows (its length times its per-character Shannon entropy).

    A cheap lower bound on what a guesser faces: 32 x ``a`` shows 0 bits,
    ``secrets.token_urlsafe(48)`` about 350. It cannot see that a random
    looking string was copied from a web page, but it catches the keyboard
    patterns and repeated characters people type.
    """
    if not secret:
        return 0.0
    counts = Counter(secret)
    n = len(secret)
    return -n * sum(c / n * math.log2(c / n) for c in counts.values())


def secret_problem(secret: str) -> str | None:
    """Why ``secret`` must not sign sessions, or None when it may."""
    if secret == DEFAULT_SECRET:
        return "is the built-in placeholder"
    if len(secret) < MIN_SECRET_LEN:
        return f"is {len(secret)} characters long, fewer than {MIN_SECRET_LEN}"
    if secret_strength(secret) < MIN_SECRET_BITS or len(set(secret)) < MIN_SECRET_DISTINCT:
        return "is too predictable (too few different characters)"
    if (secret + secret).find(secret, 1) < len(secret):
        return "is too predictable (one short part repeated)"
    return None


def check_serve_safety(settings: Settings) -> None:
    """Refuse a configuration that would expose an open server to the network."""
    problem = secret_problem(settings.secret_key)
    secret_ok = problem is None
    secret_hint = (
        f"GPUFLEET_SECRET_KEY set to a random value of at least {MIN_SECRET_LEN} characters"
        " (make one with `gpufleet secret`, or"
        " `python -c 'import secrets; print(secrets.token_urlsafe(48))'`)"
    )
    if problem is not None and settings.secret_key != DEFAULT_SECRET:
        secret_hint += f"; the one set {problem}"
    if not settings.is_loopback:
        if settings.auth == "off" or not secret_ok:
            raise ConfigError(
                f"binding to {settings.host} exposes gpufleet to the network: it needs sign-in "
                f"(GPUFLEET_AUTH=on, the default; not off) and "
                f"{secret_hint}; or bind to 127.0.0.1 (GPUFLEET_HOST) for a server only this machine reaches"
            )
    elif auth_required(settings) and not secret_ok:
        # Session cookies are signed with the secret: a known secret lets anyone forge one.
        raise ConfigError(f"sign-in is required (GPUFLEET_AUTH={settings.auth}), so it needs {secret_hint}")
    if "*" in settings.cors_origins:
        raise ConfigError(
            "GPUFLEET_CORS_ORIGINS must list exact origins (e.g. [\"https://gpus.example.org\"]), not '*':"
            " the dashboard's session cookie must not be usable from any site"
        )
    for origin in settings.cors_origins:
        if normalise_origin(origin) is None:
            raise ConfigError(f"GPUFLEET_CORS_ORIGINS: {origin!r} is not an origin like https://host[:port]")
