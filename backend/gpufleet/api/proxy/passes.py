"""A notebook's pass: the ticket that opens it, the cookie its origin sets, and the key only its page holds.

A browser sends a cookie to every port of its host name, a member's own
listener included (any member may listen on any loopback port above 1024),
so a cookie alone opens nothing here. A pass has two parts:

- the **cookie** ``gpufleet_nb_<id>``: HTTP-only, host-only, for that one
  notebook (its own host name, or its own path where notebooks share one),
  set when a single-use **ticket** from the dashboard (``POST
  /api/v1/sessions/{id}/open``, valid ``TICKET_TTL_S``) is redeemed;
- the page's **key**, derived from that cookie and written only into the page
  that redemption serves, as JupyterLab's page-config ``token``: JupyterLab
  sends it as ``Authorization: token <key>`` on its calls and as ``?token=``
  on its WebSockets (``appendToken``, set by the session's launcher). Only a
  page of that notebook's own origin can read it.

Both passes name the dashboard they came from (so a page load without a
fresh ticket can go back there for one) and whether an admin joined a
notebook that is not hers (``POST /api/v1/sessions/{id}/join``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import uuid
from dataclasses import dataclass

from gpufleet.api.auth import LOCAL_ADMIN, NOTEBOOK_TICKET_PURPOSE, AuthUser, signed_user
from gpufleet.api.proxy.answers import COOKIE_PREFIX
from gpufleet.api.proxy.notebooks import PREFIX, Notebook, may_open
from gpufleet.api.proxy.place import NoNotebookOrigin, notebook_origin, own_host_name
from gpufleet.api.security.origins import normalise_origin
from gpufleet.api.security.policy import auth_required
from gpufleet.api.security.signing import sign, unsign
from gpufleet.config import Settings

TICKET_PARAM = "gpufleet_ticket"
# Long enough to follow a link just made, short enough that one seen in a history is worthless (it works once).
TICKET_TTL_S = 60
KEY_PURPOSE = b"gpufleet/notebook-key/"


@dataclass(frozen=True)
class Pass:
    user: AuthUser
    nonce: str  # single-use for a ticket; what the page's key is derived from for a cookie
    dashboard: str | None  # the dashboard's origin the ticket was made on
    joined: bool  # an admin's explicit join of a notebook that is not hers


def make_notebook_pass(settings: Settings, user: AuthUser, session_id: str, purpose: str, ttl_s: float, *,
                       dashboard: str | None = None, joined: bool = False) -> str:
    """A signed pass for one session's notebook: the single-use ticket the dashboard hands out, or the
    cookie the notebook's origin sets for it. It names the browser session it came from, so it ends with it."""
    payload = {
        "u": str(user.id) if user.id else None,
        "t": str(user.token_id) if user.token_id else None,
        "s": str(user.session_id) if user.session_id else None,
        "nb": session_id,
        "n": uuid.uuid4().hex,
        "d": dashboard,
        "j": joined,
    }
    return sign(settings.secret_key, purpose, payload, ttl_s)


def read_pass(settings: Settings, purpose: str, value: str, session_id: str) -> Pass | None:
    """The pass ``value`` if it is valid for ``session_id``, else None. The user is looked up again
    (disabled, signed out, token revoked: no longer)."""
    payload = unsign(settings.secret_key, purpose, value)
    if payload is None or payload.get("nb") != session_id or not isinstance(payload.get("n"), str):
        return None
    dashboard = payload.get("d") if isinstance(payload.get("d"), str) else None
    if payload.get("u") is None and payload.get("s") is None:
        if auth_required(settings):
            return None
        return Pass(LOCAL_ADMIN, payload["n"], dashboard, payload.get("j") is True)
    user = signed_user(settings, purpose, value, "notebook")
    if not isinstance(user, AuthUser):
        return None
    return Pass(user, payload["n"], dashboard, payload.get("j") is True)


def page_key(settings: Settings, session_id: str, nonce: str, length: int) -> str:
    """The key of the page a cookie's redemption served: as long as the notebook's token, so it takes the
    token's place in the page byte for byte."""
    digest = hmac.new(settings.secret_key.encode(), KEY_PURPOSE + f"{session_id}/{nonce}".encode(),
                      hashlib.sha512).digest()
    key = base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")
    return key[:length].ljust(length, "0")


def key_matches(settings: Settings, session_id: str, nonce: str, token: str, offered: str | None) -> bool:
    return bool(offered) and hmac.compare_digest(page_key(settings, session_id, nonce, len(token)), offered or "")


class NotOpenable(Exception):
    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status = status


def open_link(settings: Settings, user: AuthUser, notebook: Notebook | None, session_id: str, scheme: str,
              host_name: str, *, dashboard: str | None = None, joined: bool = False) -> str:
    """The address that lets ``user``'s browser into the notebook once; :class:`NotOpenable` says why not."""
    if notebook is None:
        raise NotOpenable(404, f"there is no session {session_id!r}")
    if not may_open(user, notebook, joined=joined):
        if user.is_admin:
            raise NotOpenable(403, f"this notebook is {notebook.owner}'s: an admin opens another member's"
                                   " notebook only by joining it (Join on the Sessions page, `gpufleet session"
                                   " open --join`), which is recorded on the session")
        raise NotOpenable(403, "this session's notebook is open only to its owner")
    if not notebook.reachable:
        raise NotOpenable(409, f"session {session_id} is {notebook.status}; its notebook is not running")
    try:
        origin = notebook_origin(settings, session_id, scheme, host_name)
    except NoNotebookOrigin as exc:
        raise NotOpenable(409, str(exc)) from None
    ticket = make_notebook_pass(settings, user, session_id, NOTEBOOK_TICKET_PURPOSE, TICKET_TTL_S,
                                dashboard=dashboard, joined=joined)
    return f"{origin}{PREFIX}{session_id}/?{TICKET_PARAM}={ticket}"


def cookie_place(settings: Settings, session_id: str, secure: bool) -> tuple[str, str]:
    """The cookie's name and path: host-only (``__Host-`` over https) on a notebook's own host name; where
    notebooks share one, scoped to this notebook's path (``__Secure-`` over https), so that one notebook's
    requests never carry another's pass."""
    name = COOKIE_PREFIX + session_id.replace("-", "").lower()
    if own_host_name(settings):
        return (f"__Host-{name}" if secure else name), "/"
    return (f"__Secure-{name}" if secure else name), f"{PREFIX}{session_id}/"


def same_origin(origin: str | None, scheme: str, host: str | None) -> bool:
    """Whether a browser's ``Origin`` is this very origin (an absent one: not a browser's page)."""
    if origin is None:
        return True
    mine = normalise_origin(f"{scheme}://{host or ''}")
    return mine is not None and normalise_origin(origin) == mine
