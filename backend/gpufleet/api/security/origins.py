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
    """Whether a state-changing request comes from a page that must not use the browser's credentials.

    Not only another site: a notebook's origin is the same *site* as the
    dashboard (same host name, another port; or a sibling host name), and
    SameSite cookies ride along to the same site. So the browser's own word
    (``Sec-Fetch-Site``) must be ``same-origin`` or ``none`` (typed by the
    user), unless the Origin is one the operator listed.
    """
    if method.upper() in SAFE_METHODS:
        return False
    origin = headers.get("origin")
    if headers.get("sec-fetch-site") in ("cross-site", "same-site"):
        return not (origin and normalise_origin(origin) in {normalise_origin(o) for o in settings.cors_origins})
    return not origin_allowed(origin, headers.get("host"), settings)


def not_json_refusal(method: str, headers: Mapping[str, str]) -> str | None:
    """Why a state-changing request with the browser's credentials is refused for its body's type, or None.

    The API takes JSON. A page may send a form or ``text/plain`` to any
    address without asking first; ``application/json`` makes the browser ask
    (a CORS preflight), which only the configured origins pass.
    """
    if method.upper() in SAFE_METHODS:
        return None
    has_body = headers.get("transfer-encoding") or (headers.get("content-length") or "0").strip() not in ("", "0")
    kind = (headers.get("content-type") or "").split(";", 1)[0].strip().lower()
    if not has_body and not kind:
        return None
    if kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json")):
        return None
    return (f"this request's body is {kind or 'untyped'}; with a browser's sign-in the API takes only JSON"
            " (Content-Type: application/json)")


def cors_origins(settings: Settings) -> list[str]:
    """The configured origins, normalised, for the CORS middleware."""
    return [o for o in (normalise_origin(x) for x in settings.cors_origins) if o]
