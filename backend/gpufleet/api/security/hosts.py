"""Answer only to the host names this server is meant to be reached by.

Without sign-in, the browser's same-origin rule is the only thing between a
web page and the implicit local admin, and that rule trusts DNS: a page on
``evil.example`` whose name is made to resolve to 127.0.0.1 is "same origin"
with the local server (DNS rebinding). So a server without sign-in serves only
loopback names (``localhost``, ``127.0.0.1``, ``[::1]``, any port) and the
names an operator lists in ``GPUFLEET_ALLOWED_HOSTS``; anything else gets 400
(a WebSocket is closed with 1008) before any route runs. With sign-in an
empty list means any name; a deployment sets it to its public name. Loopback
names are always served: only this machine can send them.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from gpufleet.api.security.asgi import send_error
from gpufleet.api.security.policy import auth_required
from gpufleet.config import Settings

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def host_name(header: str) -> str | None:
    """The name part of a ``Host`` header (no port, IPv6 without brackets), or None if malformed."""
    value = header.strip().lower()
    if not value:
        return None
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[1:end], value[end + 1:]
    else:
        name, _, port = value.partition(":")
        rest = f":{port}" if port else ""
    if rest and not (rest.startswith(":") and rest[1:].isdigit()):
        return None
    return name or None


def _matches(name: str, pattern: str) -> bool:
    if pattern.startswith("*."):
        return name.endswith(pattern[1:]) and len(name) > len(pattern) - 1
    return name == pattern.strip("[]")


def host_allowed(header: str | None, settings: Settings) -> bool:
    name = host_name(header or "")
    if name is None:
        return False
    # A loopback name can only come from this machine: no rebinding there.
    if name in LOOPBACK_NAMES or any(_matches(name, p) for p in settings.allowed_hosts):
        return True
    return auth_required(settings) and not settings.allowed_hosts


class HostGuard:
    """Refuse (400, or close 1008 for a WebSocket) a request whose ``Host`` is not allowed."""

    def __init__(self, app: ASGIApp, settings: Settings):
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        host = Headers(scope=scope).get("host")
        if host_allowed(host, self.settings):
            await self.app(scope, receive, send)
            return
        served = "localhost, 127.0.0.1, [::1] and the names in GPUFLEET_ALLOWED_HOSTS"
        if not auth_required(self.settings):
            served += " (sign-in is off, so no other name is served)"
        reason = f"this server does not answer to the host name {host!r}; it serves only {served}"
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": "host name not allowed"})
            return
        await send_error(send, 400, reason)
