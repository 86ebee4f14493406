"""A notebook's own origin: where it is, the ticket that opens it, the cookie it sets there, what it may send back.

The dashboard (its origin) hands out a single-use ticket, valid
``TICKET_TTL_S``, for one session's notebook (``POST
/api/v1/sessions/{id}/open``); the notebook's origin trades it for a cookie
of its own, named after the session and good for nothing else. The
dashboard's cookie is never sent there (another host name), or is ignored
and never forwarded there (the same host name on another port: browsers
share cookies across ports).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from urllib.parse import urlsplit

from gpufleet.api.auth import LOCAL_ADMIN, NOTEBOOK_TICKET_PURPOSE, SESSION_COOKIE, AuthUser, signed_user
from gpufleet.api.proxy.notebooks import PREFIX, Notebook, may_open
from gpufleet.api.security.origins import normalise_origin
from gpufleet.api.security.policy import auth_required
from gpufleet.api.security.signing import sign, unsign
from gpufleet.config import Settings

TICKET_PARAM = "gpufleet_ticket"
# Long enough to follow a link just made, short enough that one seen in a history is worthless (it works once).
TICKET_TTL_S = 60
COOKIE_PREFIX = "gpufleet_nb_"
# What a notebook serves as a member's files (her HTML, her SVG): run it in a sandbox, an origin of nothing.
CONTENT_ROUTES = ("files/", "view/", "nbconvert/")
CONTENT_CSP = "sandbox allow-scripts allow-forms allow-popups allow-downloads; frame-ancestors 'self'"
APP_CSP = "frame-ancestors 'self'; base-uri 'self'; object-src 'none'"
# Never passed through from a notebook: the proxy sets the policy itself.
CSP_HEADERS = frozenset({b"content-security-policy", b"content-security-policy-report-only"})


class NoNotebookOrigin(Exception):
    """This server serves no notebooks (``GPUFLEET_SESSIONS_PORT=0`` and no ``GPUFLEET_SESSIONS_ORIGIN``)."""


def sessions_port(settings: Settings) -> int:
    """The port `serve` listens on for notebooks: ``GPUFLEET_SESSIONS_PORT``, else the API's port + 1; 0: none."""
    if settings.sessions_port is not None:
        return settings.sessions_port
    return settings.port + 1 if settings.port < 65535 else 0


def notebook_origin(settings: Settings, session_id: str, scheme: str, host_name: str) -> str:
    """The origin a browser opens session ``session_id``'s notebook at.

    ``GPUFLEET_SESSIONS_ORIGIN`` when set (``{id}`` filled in); else the host
    name the dashboard was reached under (``host_name``), on the sessions port.
    """
    if settings.sessions_origin:
        return settings.sessions_origin.replace("{id}", session_id)
    port = sessions_port(settings)
    if not port:
        raise NoNotebookOrigin("this server serves no notebooks: GPUFLEET_SESSIONS_PORT is 0 and"
                               " GPUFLEET_SESSIONS_ORIGIN is not set")
    host = f"[{host_name}]" if ":" in host_name else host_name
    return f"{scheme}://{host}:{port}"


def make_notebook_pass(settings: Settings, user: AuthUser, session_id: str, purpose: str, ttl_s: float) -> str:
    """A signed pass for one session's notebook: the single-use ticket the dashboard hands out, or the
    cookie the notebook's origin sets for it. It names the browser session it came from, so it ends with it."""
    payload = {
        "u": str(user.id) if user.id else None,
        "t": str(user.token_id) if user.token_id else None,
        "s": str(user.session_id) if user.session_id else None,
        "nb": session_id,
        "n": uuid.uuid4().hex,
    }
    return sign(settings.secret_key, purpose, payload, ttl_s)


def notebook_pass_user(settings: Settings, purpose: str, value: str, session_id: str) -> tuple[AuthUser, str] | None:
    """Who a notebook pass is for, and its single-use nonce, if it is valid for ``session_id``; else None.
    The user is looked up again (disabled, signed out, token revoked: no longer)."""
    payload = unsign(settings.secret_key, purpose, value)
    if payload is None or payload.get("nb") != session_id or not isinstance(payload.get("n"), str):
        return None
    if payload.get("u") is None and payload.get("s") is None:
        return (LOCAL_ADMIN, payload["n"]) if not auth_required(settings) else None
    user = signed_user(settings, purpose, value, "notebook")
    return (user, payload["n"]) if isinstance(user, AuthUser) else None


class NotOpenable(Exception):
    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status = status


def open_link(settings: Settings, user: AuthUser, notebook: Notebook | None, session_id: str, scheme: str,
              host_name: str) -> str:
    """The address that lets ``user``'s browser into the notebook once; :class:`NotOpenable` says why not."""
    if notebook is None:
        raise NotOpenable(404, f"there is no session {session_id!r}")
    if not may_open(user, notebook):
        raise NotOpenable(403, "this session's notebook is open only to its owner and admins")
    if not notebook.reachable:
        raise NotOpenable(409, f"session {session_id} is {notebook.status}; its notebook is not running")
    try:
        origin = notebook_origin(settings, session_id, scheme, host_name)
    except NoNotebookOrigin as exc:
        raise NotOpenable(409, str(exc)) from None
    ticket = make_notebook_pass(settings, user, session_id, NOTEBOOK_TICKET_PURPOSE, TICKET_TTL_S)
    return f"{origin}{PREFIX}{session_id}/?{TICKET_PARAM}={ticket}"


def expected_host(settings: Settings, session_id: str) -> str | None:
    """The host name a request for this session's notebook must name, when the operator set the origin."""
    if not settings.sessions_origin:
        return None
    return urlsplit(settings.sessions_origin.replace("{id}", session_id)).hostname


def cookie_name(session_id: str, secure: bool) -> str:
    """One cookie per session (an admin may have several open), host-only (``__Host-``) over https."""
    name = COOKIE_PREFIX + session_id.replace("-", "").lower()
    return f"__Host-{name}" if secure else name


def is_gpufleet_cookie(name: str) -> bool:
    bare = name.removeprefix("__Host-").removeprefix("__Secure-")
    return bare == SESSION_COOKIE or bare.startswith(COOKIE_PREFIX)


def same_origin(origin: str | None, scheme: str, host: str | None) -> bool:
    """Whether a browser's ``Origin`` is this very origin (an absent one: not a browser's page)."""
    if origin is None:
        return True
    mine = normalise_origin(f"{scheme}://{host or ''}")
    return mine is not None and normalise_origin(origin) == mine


def _cookie_kept(value: bytes) -> bytes | None:
    """A notebook's ``Set-Cookie`` as it may reach the browser: never one of gpufleet's names, never with
    a ``Domain`` (which would reach other host names: the dashboard's siblings)."""
    text = value.decode("latin-1")
    name = text.split("=", 1)[0].strip()
    if not name or is_gpufleet_cookie(name):
        return None
    parts = [p for p in text.split(";") if p.split("=", 1)[0].strip().lower() != "domain"]
    return ";".join(parts).encode("latin-1")


def answer_headers(headers: Iterable[tuple[bytes, bytes]], path: str) -> list[tuple[bytes, bytes]]:
    """A notebook's answer headers, filtered: its own policy replaced by ours, its cookies kept to itself."""
    out = []
    for name, value in headers:
        if name in CSP_HEADERS:
            continue
        if name == b"set-cookie":
            kept = _cookie_kept(value)
            if kept is not None:
                out.append((name, kept))
            continue
        out.append((name, value))
    rest = path[len(PREFIX):].split("/", 1)[1] if path.count("/") > 2 else ""
    policy = CONTENT_CSP if rest.startswith(CONTENT_ROUTES) else APP_CSP
    out.append((b"content-security-policy", policy.encode()))
    out.append((b"x-content-type-options", b"nosniff"))
    return out
