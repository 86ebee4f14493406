"""What a notebook's answer may carry to the browser: gpufleet's policy instead of its own, its cookies kept
to itself, and never Jupyter's login cookie."""

from __future__ import annotations

from collections.abc import Iterable

from gpufleet.api.auth import SESSION_COOKIE
from gpufleet.api.proxy.notebooks import PREFIX

COOKIE_PREFIX = "gpufleet_nb_"
# What a notebook serves as a member's files (her HTML, her SVG): run it in a sandbox, an origin of nothing.
CONTENT_ROUTES = ("files/", "view/", "nbconvert/")
CONTENT_CSP = "sandbox allow-scripts allow-forms allow-popups allow-downloads; frame-ancestors 'self'"
APP_CSP = "frame-ancestors 'self'; base-uri 'self'; object-src 'none'"
# Never passed through from a notebook: the proxy sets the policy itself; and a service worker stays
# within the path it was served from (with one host name for all notebooks, its own notebook's).
CSP_HEADERS = frozenset({b"content-security-policy", b"content-security-policy-report-only",
                         b"service-worker-allowed"})
# jupyter_server's login cookie (``username-<host>-<port>``), which it sets after a token-authenticated
# request. It would sign its holder in at the notebook's loopback port directly, and browsers send it to
# every port of a host, a member's own listener included: it never reaches the browser.
JUPYTER_LOGIN_PREFIX = "username-"


def is_gpufleet_cookie(name: str) -> bool:
    bare = name.removeprefix("__Host-").removeprefix("__Secure-")
    return bare == SESSION_COOKIE or bare.startswith(COOKIE_PREFIX)


def _cookie_kept(value: bytes) -> bytes | None:
    """A notebook's ``Set-Cookie`` as it may reach the browser: never one of gpufleet's names nor Jupyter's
    login cookie, never with a ``Domain`` (which would reach other host names: the dashboard's siblings)."""
    text = value.decode("latin-1")
    name = text.split("=", 1)[0].strip()
    if not name or is_gpufleet_cookie(name) or name.startswith(JUPYTER_LOGIN_PREFIX):
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
