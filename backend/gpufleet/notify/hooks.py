"""A user's own webhooks: make, list, change, remove. Each function takes an open session.

Only the owner reaches a hook: every lookup is by id *and* owner, so another
user's hook reads as not found (its existence is not told either).
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterable
from urllib.parse import urlsplit

import httpx
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpufleet.bounds import MAX_URL
from gpufleet.db.notify import Webhook
from gpufleet.notify.events import EVENTS
from gpufleet.notify.hostnames import BadHost, ascii_url
from gpufleet.notify.outbound import AddressRefused, Policy

FORMATS = ("json", "slack")


class HookError(ValueError):
    """A request about a webhook that cannot be done; the message says what to fix."""


class HookNotFound(HookError):
    pass


def check_url(url: str) -> str:
    """``url`` if it is one a webhook may have, with its host in ASCII (``gpufleet.notify.hostnames``): the form
    that is judged, stored and sent."""
    url = url.strip()
    if len(url) > MAX_URL:
        raise HookError(f"the URL is longer than {MAX_URL} characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as exc:
        raise HookError(f"{url!r} is not a URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise HookError(f"a webhook URL starts with http:// or https:// (got {url!r})")
    if not parts.hostname:
        raise HookError(f"{url!r} names no host")
    if parts.username or parts.password:
        raise HookError("a webhook URL may not carry a user name or password; put a token in its path or query")
    if any(c.isspace() for c in url):
        raise HookError("a webhook URL may not contain spaces")
    try:
        url = ascii_url(url)
        sent_to = httpx.URL(url).raw_host.decode("ascii")
    except BadHost as exc:
        raise HookError(f"{exc}; a webhook URL names its receiver's host") from None
    except (ValueError, httpx.InvalidURL) as exc:
        raise HookError(f"{url!r} is not a URL: {exc}") from None
    judged = urlsplit(url).hostname or ""
    if sent_to.rstrip(".") != judged.rstrip("."):  # the client reads the host that was judged, or it is refused
        raise HookError(f"{url!r} names its host ambiguously ({judged} or {sent_to}); write it plainly")
    return url


def check_target(url: str, policy: Policy) -> str:
    """``check_url``, and the address: never loopback, private, link-local or metadata (unless allowed)."""
    written = urlsplit(url.strip()).hostname or ""
    url = check_url(url)
    try:
        policy.check_host(written)  # normalised there too, and named as written
    except AddressRefused as exc:
        raise HookError(str(exc)) from None
    return url


def check_events(events: Iterable[str] | None) -> list[str]:
    chosen = list(dict.fromkeys(events)) if events is not None else list(EVENTS)
    unknown = [e for e in chosen if e not in EVENTS]
    if unknown:
        raise HookError(f"unknown event(s) {', '.join(unknown)}; known: {', '.join(EVENTS)}")
    if not chosen:
        raise HookError(f"name at least one event; known: {', '.join(EVENTS)}")
    return chosen


def create(sess: Session, owner: str, url: str, fmt: str = "json", events: Iterable[str] | None = None,
           limit: int = 20, policy: Policy | None = None) -> Webhook:
    """A new hook of ``owner``; its ``secret`` is readable on the returned row only (shown once)."""
    if fmt not in FORMATS:
        raise HookError(f"format is one of {', '.join(FORMATS)} (got {fmt!r})")
    hook = Webhook(owner=owner, url=check_target(url, policy or Policy()), format=fmt, events=check_events(events),
                   secret="whsec_" + secrets.token_urlsafe(32), enabled=True)
    count = sess.execute(select(func.count()).select_from(Webhook).where(Webhook.owner == owner)).scalar_one()
    if count >= limit:
        raise HookError(f"{owner} has {count} webhooks, the most allowed (GPUFLEET_WEBHOOKS_PER_USER); remove one")
    sess.add(hook)
    sess.flush()
    return hook


def list_own(sess: Session, owner: str) -> list[Webhook]:
    return list(sess.execute(select(Webhook).where(Webhook.owner == owner).order_by(Webhook.created_at)).scalars())


def get_own(sess: Session, owner: str, hook_id: uuid.UUID) -> Webhook:
    hook = sess.execute(select(Webhook).where(Webhook.id == hook_id, Webhook.owner == owner)).scalar_one_or_none()
    if hook is None:
        raise HookNotFound(f"you have no webhook {hook_id}")
    return hook


def update(sess: Session, owner: str, hook_id: uuid.UUID, *, url: str | None = None, fmt: str | None = None,
           events: Iterable[str] | None = None, enabled: bool | None = None,
           policy: Policy | None = None) -> Webhook:
    hook = get_own(sess, owner, hook_id)
    if url is not None:
        hook.url = check_target(url, policy or Policy())
    if fmt is not None:
        if fmt not in FORMATS:
            raise HookError(f"format is one of {', '.join(FORMATS)} (got {fmt!r})")
        hook.format = fmt
    if events is not None:
        hook.events = check_events(events)
    if enabled is not None:
        hook.enabled = enabled
    sess.flush()
    return hook


def remove(sess: Session, owner: str, hook_id: uuid.UUID) -> None:
    sess.delete(get_own(sess, owner, hook_id))
    sess.flush()
