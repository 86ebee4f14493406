"""Which browser origins may use a user's cookie.

Cookies ride along on cross-site requests and WebSockets are not covered by
CORS, so whenever the browser supplied the credentials (a cookie, or the
implicit local admin) a state-changing request or a WebSocket must come from an
allowed origin: the server's own, or one listed in ``GPUFLEET_CORS_ORIGINS``.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

from gpufleet.config import Settings

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


def normalise_origin(origin: str) -> str | None:
    """``scheme://host[:port]`` in lowercase, the scheme's default port left out."""
    try:
        parts = urlsplit(origin.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
        return None
    if parts.query or parts.fragment or parts.username or parts.password:
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    shown_port = "" if port in (None, _DEFAULT_PORTS[parts.scheme]) else f":{port}"
    return f"{parts.scheme}://{host.lower()}{shown_port}"


def origin_allowed(origin: str | None, host_header: str | None, settings: Settings) -> bool:
    """An absent Origin (a non-browser client) passes; otherwise same-origin or configured.

    Same-origin compares the Origin's host and port with the Host header the
    request arrived with (a proxy in front must pass it on unchanged).
    """
    if origin is None:
        return True
    norm = normalise_origin(origin)
    if norm is None:
        return False
    scheme = norm.split("://", 1)[0]
    if host_header and normalise_origin(f"{scheme}://{host_header.strip()}") == norm:
        return True
    return norm in {normalise_origin(o) for o in settings.cors_origins}


def is_cross_site(method: str, headers: Mapping[str, str], settings: Settings) -> bool:
    """Whether a state-changing request comes from a site that must not use the browser's credentials."""
    if method.upper() in SAFE_METHODS:
        return False
    if headers.get("sec-fetch-site") == "cross-site":
        return True
    return not origin_allowed(headers.get("origin"), headers.get("host"), settings)


def cors_origins(settings: Settings) -> list[str]:
    """The configured origins, normalised, for the CORS middleware."""
    return [o for o in (normalise_origin(x) for x in settings.cors_origins) if o]
