"""Forward one HTTP request to a notebook and stream its answer back, both bodies unbuffered."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from http.cookiejar import CookieJar, DefaultCookiePolicy
from urllib.parse import urlsplit

import httpx
from starlette.types import Receive, Scope, Send

from gpufleet.api.proxy.answers import is_gpufleet_cookie
from gpufleet.api.proxy.upstream import Upstream
from gpufleet.api.security.asgi import send_error

log = logging.getLogger(__name__)

# Headers that belong to one connection (RFC 9110 §7.6.1), and what the proxy sets itself.
HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
    "transfer-encoding", "upgrade", "host",
})
# Never passed on to the notebook: gpufleet's credentials are for gpufleet, and the notebook's token
# comes from the proxy alone; forwarding headers would name a client the notebook cannot check.
DROPPED = frozenset({"authorization", "origin", "referer", "forwarded", "x-forwarded-for",
                     "x-forwarded-proto", "x-forwarded-host", "x-real-ip", "x-gpufleet-relay"})
# A query parameter never passed on: Jupyter's token (the proxy's header is the token), gpufleet's ticket.
NOT_FORWARDED_PARAMS = frozenset({"token", "gpufleet_ticket"})
Shape = Callable[[int, list[tuple[bytes, bytes]]], list[tuple[bytes, bytes]]]


@dataclass(frozen=True)
class Answer:
    """What becomes of a forwarded request and its answer on the way: ``secret`` (the notebook's token)
    is replaced in the answer by ``replacement`` (a page's key of the same length) or blanked; ``cookies``:
    whether the browser's own cookies go to the notebook; ``shape``: the answer's headers for the browser."""

    secret: str | None = None
    replacement: str | None = None
    cookies: bool = True
    shape: Shape | None = None
    # Where to send the browser instead of this answer (by its status and headers), or None: keep it.
    instead: Callable[[int, list[tuple[bytes, bytes]]], str | None] | None = None


def proxy_client() -> httpx.AsyncClient:
    """The client that forwards to notebooks. It keeps no cookie: a jar would hand one browser's (or
    Jupyter's login cookie) to every later request, a request forwarded as no one included."""
    # No read timeout: a notebook answers long polls and streams when it has something to say.
    return httpx.AsyncClient(timeout=httpx.Timeout(None, connect=10.0), follow_redirects=False, trust_env=False,
                             cookies=CookieJar(DefaultCookiePolicy(allowed_domains=[])))


def without_gpufleet_cookies(header: str) -> str:
    """A ``Cookie`` header less gpufleet's own cookies (the dashboard's, the notebooks' origin's): the
    notebook sets and reads its own."""
    kept = []
    for part in header.split(";"):
        name = part.split("=", 1)[0].strip()
        if name and not is_gpufleet_cookie(name):
            kept.append(part.strip())
    return "; ".join(kept)


def request_headers(scope: Scope, upstream: Upstream, cookies: bool = True) -> list[tuple[str, str]]:
    """The client's headers as the notebook should see them, plus the upstream's (its token); ``cookies``
    False: none of the browser's cookies (a request forwarded as no one)."""
    out: list[tuple[str, str]] = []
    for raw_name, raw_value in scope["headers"]:
        name = raw_name.decode("latin-1").lower()
        value = raw_value.decode("latin-1")
        if name in HOP_BY_HOP or name in DROPPED or name.startswith("sec-websocket-"):
            continue
        if name == "accept-encoding":
            continue  # plain bodies, so the token can be blanked out of them (loopback: no cost worth saving)
        if name == "cookie":
            value = without_gpufleet_cookies(value) if cookies else ""
            if not value:
                continue
        out.append((name, value))
    # Same-origin for the notebook, once gpufleet itself checked the browser's Origin.
    if any(n == b"origin" for n, _ in scope["headers"]):
        out.append(("origin", upstream.origin))
    out.extend(upstream.headers)
    return out


def response_headers(headers: Iterable[tuple[bytes, bytes]], upstream: Upstream) -> list[tuple[bytes, bytes]]:
    out = []
    for raw_name, raw_value in headers:
        name = raw_name.lower()
        if name.decode("latin-1") in HOP_BY_HOP:
            continue
        if name == b"location":
            raw_value = _local_location(raw_value.decode("latin-1"), upstream).encode("latin-1")
        out.append((name, raw_value))
    return out


def _local_location(location: str, upstream: Upstream) -> str:
    """A redirect to the notebook's own address becomes a path on gpufleet (the base URLs are the same)."""
    if location.startswith(upstream.origin):
        parts = urlsplit(location)
        return parts.path + (f"?{parts.query}" if parts.query else "")
    return location


def target_url(scope: Scope, origin: str) -> str:
    """The notebook's URL for this request, less the parameters that are gpufleet's (a page's key, a ticket)."""
    path = scope.get("raw_path") or scope["path"].encode()
    query = (scope.get("query_string") or b"").decode("latin-1")
    kept = "&".join(p for p in query.split("&") if p and p.split("=", 1)[0] not in NOT_FORWARDED_PARAMS)
    return origin + path.decode("latin-1") + (f"?{kept}" if kept else "")


class Scrubber:
    """Replaces the notebook's token wherever it shows in a streamed answer.

    JupyterLab writes the server's token into its page (page-config
    ``token``, for its scripts' own requests); the user must never see it.
    The page a ticket opens gets the page's key in its place
    (``replacement``), every other answer a blank. Either has the token's
    length, so ``Content-Length`` stays true; a token split across chunks is
    caught by holding back the last ``len(token) - 1`` bytes.
    """

    def __init__(self, secret: str | None, replacement: str | None = None):
        self.secret = secret.encode() if secret else b""
        self.blank = replacement.encode() if replacement else b"0" * len(self.secret)
        assert len(self.blank) == len(self.secret), "a replacement keeps the token's length"
        self.held = b""

    def feed(self, chunk: bytes) -> bytes:
        if not self.secret:
            return chunk
        data = (self.held + chunk).replace(self.secret, self.blank)
        keep = len(self.secret) - 1
        self.held, out = data[len(data) - keep:], data[:len(data) - keep]
        return out

    def flush(self) -> bytes:
        out, self.held = self.held, b""
        return out


async def _body(receive: Receive) -> AsyncIterator[bytes]:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        chunk = message.get("body", b"")
        if chunk:
            yield chunk
        if not message.get("more_body", False):
            return


async def forward_http(client: httpx.AsyncClient, scope: Scope, receive: Receive, send: Send,
                       upstream: Upstream, answer: Answer | None = None) -> None:
    """Forward the request, and its answer back as ``answer`` says."""
    answer = answer or Answer()
    headers = request_headers(scope, upstream, answer.cookies)
    has_body = any(n in ("content-length", "transfer-encoding") for n, _ in
                   ((k.decode("latin-1").lower(), v) for k, v in scope["headers"]))
    request = client.build_request(scope["method"], target_url(scope, upstream.origin), headers=headers,
                                   content=_body(receive) if has_body else None)
    try:
        response = await client.send(request, stream=True)
    except httpx.HTTPError as exc:
        log.info("notebook at %s did not answer: %s", upstream.origin, exc)
        await send_error(send, 502, "the session's notebook is not answering (it may be starting or have"
                                    " stopped); try again in a moment")
        return
    scrub = Scrubber(answer.secret, answer.replacement)
    answer_headers = [(n, v.replace(scrub.secret, b"0" * len(scrub.secret)) if scrub.secret else v)
                      for n, v in response_headers(response.headers.raw, upstream)]
    elsewhere = answer.instead(response.status_code, answer_headers) if answer.instead is not None else None
    if elsewhere is not None:
        await response.aclose()
        await send({"type": "http.response.start", "status": 303,
                    "headers": [(b"location", elsewhere.encode("latin-1")), (b"cache-control", b"no-store"),
                                (b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    if answer.shape is not None:
        answer_headers = answer.shape(response.status_code, answer_headers)
    try:
        await send({"type": "http.response.start", "status": response.status_code, "headers": answer_headers})
        async for chunk in response.aiter_raw():
            await send({"type": "http.response.body", "body": scrub.feed(chunk), "more_body": True})
        await send({"type": "http.response.body", "body": scrub.flush(), "more_body": False})
    except httpx.HTTPError as exc:
        # The answer had begun: all that is left is to end it short.
        log.info("notebook at %s broke off its answer: %s", upstream.origin, exc)
    finally:
        await response.aclose()
