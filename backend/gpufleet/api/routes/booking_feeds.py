"""iCalendar feeds of bookings (gpufleet.bookings.feeds; docs/bookings.md).

``POST /api/v1/booking-feeds`` gives the signed-in member a feed address of their own bookings, or of a team
they are in, with a new secret token (the previous one of that feed stops working). ``GET
/api/v1/bookings.ics?feed=…`` is what a calendar app polls: it takes no sign-in, only that token, which reads
that one feed and nothing else.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import Response
from sqlalchemy.orm import Session

from gpufleet.api.deps import MemberUser, SessionDep, SettingsDep
from gpufleet.api.security.openapi import error_response
from gpufleet.bookings import feeds, service, view
from gpufleet.db.session import write_session
from gpufleet.devices.device import index_list
from gpufleet.db.types import utcnow
from gpufleet.users.groups import groups_of_users
from gpufleet.wire.bookings import FeedCreate, FeedCreated

router = APIRouter(prefix="/api/v1", tags=["bookings"])


def _members(sess: Session, group: str) -> list[str]:
    return sorted(u for u, groups in groups_of_users(sess).items() if group in groups)


@router.post("/booking-feeds", response_model=FeedCreated, status_code=201, operation_id="bookings-feed-create",
             responses={403: error_response("Not a group you are in")})
def create_feed(body: FeedCreate, request: Request, settings: SettingsDep, user: MemberUser) -> FeedCreated:
    """A (new) secret feed address for a calendar app; it replaces the feed's previous token."""
    with write_session(settings) as sess:
        if body.group is not None and user.name not in _members(sess, body.group) and user.role != "admin":
            raise HTTPException(403, f"you are not in group {body.group!r}: ask for a feed of a group you are in")
        token = feeds.issue(sess, user.name, body.group, utcnow())
    url = str(request.url_for("bookings_feed").include_query_params(feed=token))
    return FeedCreated(url=url, token=token, group=body.group)


@router.get("/bookings.ics", operation_id="bookings-feed", name="bookings_feed",
            responses={200: {"content": {"text/calendar": {}}, "description": "an RFC 5545 calendar"},
                       404: error_response("No such feed")})
def bookings_feed(request: Request, sess: SessionDep,
                  feed: Annotated[str, Query(max_length=128, description="the feed's secret token")]) -> Response:
    """The feed's bookings not yet over and of the last 30 days, as iCalendar text."""
    found = feeds.resolve(sess, feed)
    if found is None:
        raise HTTPException(404, "no such feed (its token was rotated or never existed): ask for a new feed address")
    now = utcnow()
    owners = [found.owner] if found.group is None else _members(sess, found.group)
    items = [b for who in owners for b in service.visible(sess, owner=who, since=now - timedelta(days=30))]
    items.sort(key=lambda b: b.start_at)
    where: dict[object, str] = {}
    for b in items:
        gpus = view.public(sess, b, now).gpus
        where[b.id] = f"{gpus[0].host} GPU {index_list(g.index for g in gpus)}" if gpus else ""
    name = f"gpufleet bookings of {found.group or found.owner}"
    text = feeds.ical(items, where, name, request.url.hostname or "gpufleet", now)
    return Response(text, media_type="text/calendar; charset=utf-8", headers={"Cache-Control": "private, no-store"})
