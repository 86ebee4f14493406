"""Instants as people mean them: a start and an end in a time zone of theirs or UTC, stored as UTC instants.

A wall-clock time without an offset is read in the zone given; an offset in the text wins over the zone.
A wall-clock time that a daylight-saving change skips does not exist and is refused; one it repeats is
the earlier of the two (``fold=0``). Bookings start and end on whole minutes.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


class FieldError(ValueError):
    """A value a person gave that cannot be used; ``field`` names it (a 422's ``loc``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def zone(name: str | None, field: str = "time_zone") -> ZoneInfo:
    try:
        return ZoneInfo(name or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        raise FieldError(field, f"{name!r} is no time zone: give an IANA name such as Europe/Berlin or UTC") from None


def instant(value: str | datetime, tz: ZoneInfo, field: str) -> datetime:
    """``value`` (ISO 8601 text or a datetime) as an aware UTC instant, read in ``tz`` when it has no offset."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise FieldError(field, f"{value!r} is no time: give it as 2026-12-04T14:00 (ISO 8601)") from None
    if value.tzinfo is None:
        local = value.replace(tzinfo=tz)
        back = local.astimezone(timezone.utc).astimezone(tz)
        if back.replace(tzinfo=None) != value:
            raise FieldError(field, f"{value:%Y-%m-%d %H:%M} does not exist in {tz.key}: the clocks skip it "
                                    f"(daylight saving); give a time before or after the change")
        value = local
    value = value.astimezone(timezone.utc)
    if value.second or value.microsecond:
        raise FieldError(field, f"bookings start and end on whole minutes, not {value:%H:%M:%S}")
    return value


def window(start: str | datetime, end: str | datetime | None, hours: float | None, tz_name: str | None,
           now: datetime) -> tuple[datetime, datetime]:
    """A booking's (start, end), checked: the end after the start and the start not in the past."""
    tz = zone(tz_name)
    begins = instant(start, tz, "start")
    if end is None and hours is None:
        raise FieldError("end", "give an end (or hours)")
    if end is not None:
        ends = instant(end, tz, "end")
    else:
        assert hours is not None
        if hours <= 0:
            raise FieldError("hours", "hours must be more than 0")
        ends = begins + timedelta(hours=hours)
        if ends.second or ends.microsecond:
            raise FieldError("hours", f"{hours} h does not end on a whole minute")
    if ends <= begins:
        raise FieldError("end", f"the end ({ends:%Y-%m-%d %H:%M} UTC) is not after the start "
                                f"({begins:%Y-%m-%d %H:%M} UTC)")
    if begins < now.replace(second=0, microsecond=0):
        raise FieldError("start", f"the start ({begins:%Y-%m-%d %H:%M} UTC) is in the past")
    return begins, ends


def ceil_minute(t: datetime) -> datetime:
    """``t`` on a whole minute: itself, or the next one."""
    return t if not (t.second or t.microsecond) else t.replace(second=0, microsecond=0) + timedelta(minutes=1)
