"""The second part of a browser's sign-in: a key only the dashboard's own origin holds.

A browser sends a cookie by itself, to every port of the host it was set for,
and any member can listen on a loopback port: a page she wrote (a notebook,
opened by an admin) can point the admin's browser at her listener, which then
receives the admin's session cookie. So the cookie alone signs nothing in.
Each browser session also has a *page key*, given once to the page that signed
in (in the sign-in answer's body, or in a sign-in link's redirect fragment,
which no server sees) and kept in that origin's ``localStorage``; the dashboard
sends it as the :data:`HEADER` on every request. A browser never adds a header
by itself, and another origin (another port, another host) cannot read the
dashboard's storage, so a captured cookie replayed with ``curl`` answers 401.

The key is derived from the session's own row key under the server's secret,
so nothing more is stored and it dies with its session.

A download (a training's checkpoint) is a navigation, which carries no header:
it goes through a *download ticket* instead, asked for with the cookie and the
key, single-use, for one path, valid seconds.
"""

from __future__ import annotations

import hashlib
import hmac
import uuid
from collections.abc import Mapping
from typing import Any

from gpufleet.api.security.ratelimits import get_limiter
from gpufleet.api.security.signing import sign, unsign
from gpufleet.config import Settings

HEADER = "X-Gpufleet-Key"
DOWNLOAD_PURPOSE = "download-ticket"
# What a download ticket may open: a training's files (``/api/v1/trainings/<id>/files/<path>``).
DOWNLOAD_PREFIX = "/api/v1/trainings/"
DOWNLOAD_MARK = "/files/"
DOWNLOAD_TICKET_TTL_S = 30


def page_key(settings: Settings, session_id: uuid.UUID | str, row_key: str) -> str:
    """The page key of the browser session ``session_id`` whose cookie carries ``row_key``."""
    message = f"gpufleet/page-key/{session_id}/{row_key}".encode()
    return hmac.new(settings.secret_key.encode("utf-8"), message, hashlib.sha256).hexdigest()


def header_matches(settings: Settings, payload: Mapping[str, Any], headers: Mapping[str, str]) -> bool:
    """Whether ``headers`` carry the page key of the session a cookie's ``payload`` names."""
    sent = headers.get(HEADER.lower()) or ""
    session_id, row_key = payload.get("s"), payload.get("k")
    if not sent or not isinstance(session_id, str) or not isinstance(row_key, str):
        return False
    return hmac.compare_digest(sent.encode("utf-8", "replace"), page_key(settings, session_id, row_key).encode())


def downloadable(path: str) -> bool:
    """Whether a download ticket may be made for ``path``: one of a training's files, nothing else."""
    return (path.startswith(DOWNLOAD_PREFIX) and DOWNLOAD_MARK in path[len(DOWNLOAD_PREFIX):]
            and ".." not in path.split("/") and "?" not in path and "#" not in path)


def make_download_ticket(settings: Settings, user_id: uuid.UUID | None, token_id: uuid.UUID | None,
                         session_id: uuid.UUID | None, path: str) -> str:
    payload = {"u": str(user_id) if user_id else None, "t": str(token_id) if token_id else None,
               "s": str(session_id) if session_id else None, "p": path, "n": uuid.uuid4().hex}
    return sign(settings.secret_key, DOWNLOAD_PURPOSE, payload, DOWNLOAD_TICKET_TTL_S)


def claim_download_ticket(app: Any, settings: Settings, ticket: str, path: str) -> dict[str, Any] | None:
    """The payload of a valid download ticket made for exactly ``path``, the first time it is used; else None."""
    payload = unsign(settings.secret_key, DOWNLOAD_PURPOSE, ticket)
    if payload is None or payload.get("p") != path or not isinstance(payload.get("n"), str):
        return None
    # A ticket rides in a URL (history, a proxy's log): it opens one download, once.
    if not get_limiter(app, settings).claim_once(f"download-ticket:{payload['n']}", DOWNLOAD_TICKET_TTL_S + 5):
        return None
    return payload
