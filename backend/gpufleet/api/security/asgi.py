"""What the request guards share: which paths need a user, and a JSON refusal sent before any route runs."""

from __future__ import annotations

import json

from starlette.types import Send

SIGN_IN_PATH = "/api/v1/auth/sign-in"
# Where a browser follows a sign-in link from `gpufleet open` (the link is its credential).
LINK_PATH = "/api/v1/auth/link"
# A calendar app's poll of a bookings feed: its secret feed token (a query parameter) is read by that route
# alone, for that one feed, and signs no one in (gpufleet.bookings.feeds).
FEED_PATH = "/api/v1/bookings.ics"
# Reachable without credentials: signing in needs none, signing out must always work.
OPEN_PATHS = frozenset({SIGN_IN_PATH, LINK_PATH, "/api/v1/auth/sign-out", FEED_PATH})


def is_gated(path: str) -> bool:
    """Whether a request to ``path`` must prove who it is: the API (but signing in and out) and /metrics."""
    if path in OPEN_PATHS:
        return False
    return path.startswith("/api/") or path == "/metrics" or path.startswith("/metrics/")


async def send_error(send: Send, status: int, detail: str, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = json.dumps({"detail": detail}).encode("utf-8")
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
