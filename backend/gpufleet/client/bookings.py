"""The client's calls for bookings (mixed into ``gpufleet.client.Client``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpufleet import wire

if TYPE_CHECKING:
    from gpufleet.wire.bookings import BookingPublic, BookingsPublic, FeedCreated, FreeWindowPublic
from gpufleet.client.sharing import checked

API = "/api/v1/bookings"


class BookingCalls:
    """Book, list, show, cancel, and find the next free window, over ``Client``'s ``_get``, ``_post``, ``_send``."""

    _get: Any
    _post: Any
    _send: Any

    def book(self, **fields: Any) -> BookingPublic:
        """Book GPUs (the fields of ``wire.BookingCreate``); a conflict is a ``Conflict`` naming the booking in the
        way and the next free window."""
        return self._post(wire.BookingPublic, API, checked(wire.BookingCreate, "book", **fields))

    def bookings(self, *, mine: bool = False, tz: str | None = None, released: bool = False) -> BookingsPublic:
        params: dict[str, Any] = {"mine": mine, "released": released}
        if tz:
            params["tz"] = tz
        return self._get(wire.BookingsPublic, API, **params)

    def booking(self, booking_id: str, *, tz: str | None = None) -> BookingPublic:
        return self._get(wire.BookingPublic, f"{API}/{booking_id}", **({"tz": tz} if tz else {}))

    def cancel_booking(self, booking_id: str) -> BookingPublic:
        return wire.BookingPublic.model_validate(self._send("DELETE", f"{API}/{booking_id}").json())

    def next_free(self, gpus: int, hours: float, **where: Any) -> FreeWindowPublic:
        return self._get(wire.FreeWindowPublic, "/api/v1/free-window", gpus=gpus, hours=hours,
                         **{k: v for k, v in where.items() if v is not None})

    def booking_feed(self, group: str | None = None) -> FeedCreated:
        """A new secret iCalendar feed address of one's own (or ``group``'s) bookings; the old one ends."""
        return self._post(wire.FeedCreated, "/api/v1/booking-feeds", {"group": group} if group else {})
