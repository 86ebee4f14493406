"""iCalendar feeds of bookings: one's own, or a team's, at a secret address a calendar app can poll.

A calendar app sends no bearer header, so the feed is reached by a URL carrying a feed token. The token is
random, kept only as its SHA-256, and reads exactly one feed: it is no API token, and nothing that signs a
request in looks at it. Asking for a new one for the same feed replaces the old (rotation).

The text is RFC 5545: CRLF line ends, lines folded at 75 octets, times in UTC (``Z``).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from gpufleet.db.bookings import Booking, BookingFeed
from gpufleet.db.models import User
from gpufleet.db.sharing import Group, GroupMember

PREFIX = "gfcal_"


@dataclass(frozen=True)
class Feed:
    owner: str
    group: str | None  # None: the owner's own bookings


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def issue(sess: Session, owner: str, group: str | None, now: datetime) -> str:
    """A new feed token for ``owner``'s own (or ``group``'s) bookings; the previous one stops working."""
    token = PREFIX + secrets.token_urlsafe(32)
    sess.execute(delete(BookingFeed).where(BookingFeed.owner == owner, BookingFeed.group_name == (group or "")))
    sess.add(BookingFeed(owner=owner, group_name=group or "", token_hash=_hash(token), created_at=now))
    sess.flush()
    return token


def resolve(sess: Session, token: str) -> Feed | None:
    if not token.startswith(PREFIX) or len(token) > 128:
        return None
    row = sess.scalar(select(BookingFeed).where(BookingFeed.token_hash == _hash(token)))
    if row is None or not _may_read(sess, row.owner, row.group_name or None):
        return None
    return Feed(row.owner, row.group_name or None)


def _may_read(sess: Session, owner: str, group: str | None) -> bool:
    """Whether ``owner`` could ask for this feed now: an enabled account and, for a team's feed, still in the
    team (or an admin). A feed address outlives neither: copied while in a team, it ends when its owner leaves."""
    user = sess.scalar(select(User).where(User.name == owner))
    if user is None or user.disabled:
        return False
    if group is None or user.role == "admin":
        return True
    member = (select(GroupMember.id).join(Group, Group.id == GroupMember.group_id)
              .where(Group.name == group, GroupMember.user_id == user.id))
    return sess.scalar(member) is not None


def _escape(text: str) -> str:
    """A TEXT value's escapes (RFC 5545 3.3.11)."""
    for raw, escaped in (("\\", "\\\\"), (";", "\\;"), (",", "\\,"), ("\r\n", "\\n"), ("\n", "\\n")):
        text = text.replace(raw, escaped)
    return text


def _fold(line: str) -> str:
    """Split a content line into pieces of at most 75 octets, never inside a UTF-8 character (RFC 5545 3.1)."""
    out: list[str] = []
    piece, size, limit = "", 0, 75
    for ch in line:
        n = len(ch.encode())
        if size + n > limit:
            out.append(piece)
            piece, size, limit = "", 0, 74  # a continuation line starts with one space
        piece += ch
        size += n
    out.append(piece)
    return "\r\n ".join(out)


def _utc(t: datetime) -> str:
    return t.strftime("%Y%m%dT%H%M%SZ")


def ical(bookings: list[Booking], gpus_of: dict[object, str], name: str, host: str, now: datetime) -> str:
    """The feed's text; ``gpus_of`` maps a booking's id to its GPUs' words (``gpu-01: 0,1``)."""
    lines = ["BEGIN:VCALENDAR", "VERSION:2.0", "PRODID:-//gpufleet//bookings//EN", "CALSCALE:GREGORIAN",
             f"X-WR-CALNAME:{_escape(name)}"]
    for b in bookings:
        plural = "s" if b.gpu_count != 1 else ""
        what = "Maintenance" if b.kind == "maintenance" else f"{b.owner}: {b.gpu_count} GPU{plural}"
        where = gpus_of.get(b.id, "")
        summary = f"{what} on {where}" if where else what
        lines += ["BEGIN:VEVENT", f"UID:{b.id}@{host}", f"DTSTAMP:{_utc(now)}", f"DTSTART:{_utc(b.start_at)}",
                  f"DTEND:{_utc(b.end_at)}", f"SUMMARY:{_escape(summary)}"]
        if b.reason:
            lines.append(f"DESCRIPTION:{_escape(b.reason)}")
        if where:
            lines.append(f"LOCATION:{_escape(where)}")
        lines.append("END:VEVENT")
    lines.append("END:VCALENDAR")
    return "".join(_fold(line) + "\r\n" for line in lines)
