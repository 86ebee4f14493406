"""Bookings: GPUs held ahead over a window (gpufleet.bookings; docs/bookings.md).

Everyone signed in sees every booking (the fleet is shared, and knowing who holds what when is the point);
a member books and cancels their own within the admin's limits, an admin books for anyone, past the limits,
and blocks maintenance windows. A bad time is a 422 naming its field; GPUs already booked over the window
are a 409 naming the booking in the way and the next free window.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query
from fastapi.responses import JSONResponse

from gpufleet.api.deps import CurrentUser, MemberUser, SessionDep, SettingsDep
from gpufleet.api.security.openapi import error_response
from gpufleet.bookings import service, times, view, windows
from gpufleet.db.session import write_session
from gpufleet.db.types import utcnow
from gpufleet.wire.bookings import (
    BookingConflictPublic,
    BookingCreate,
    BookingInTheWay,
    BookingPublic,
    BookingsPublic,
    BookingWindow,
    FreeWindowPublic,
)

router = APIRouter(prefix="/api/v1", tags=["bookings"])
BookingPath = Annotated[uuid.UUID, Path(description="a booking's id")]
TzQuery = Annotated[str | None, Query(max_length=64, description="show times in this IANA zone (the viewer's)")]
CONFLICT: dict[int | str, dict[str, Any]] = {
    409: {"description": "Those GPUs are booked over the window", "model": BookingConflictPublic}}
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: error_response("No such booking")}


def _field(exc: times.FieldError, where: str = "body") -> HTTPException:
    return HTTPException(422, [{"type": "value_error", "loc": [where, exc.field], "msg": exc.message}])


def _conflict(exc: service.Conflict) -> JSONResponse:
    way = exc.in_the_way
    body = BookingConflictPublic(
        detail=str(exc),
        in_the_way=BookingInTheWay(id=way.id, owner=way.owner, kind=way.kind, start=way.start_at, end=way.end_at)
        if way else None,
        next_free=BookingWindow(start=exc.free[0], end=exc.free[1]) if exc.free else None)
    return JSONResponse(body.model_dump(mode="json"), status_code=409)


def _wanted(body: BookingCreate, now: datetime) -> service.Wanted:
    start, end = times.window(body.start, body.end, body.hours, body.time_zone, now)
    return service.Wanted(start, end, body.gpus, host=body.host,
                          gpu_indices=tuple(body.gpu_indices) if body.gpu_indices is not None else None,
                          model=body.model, owner=body.owner, kind=body.kind, reason=body.reason,
                          time_zone=body.time_zone)


@router.post("/bookings", response_model=BookingPublic, status_code=201, operation_id="bookings-create",
             responses={**CONFLICT, 403: error_response("Members book for themselves only")})
def create_booking(body: BookingCreate, settings: SettingsDep, user: MemberUser) -> Any:
    """Book GPUs from start to end: on a host, exactly some of its GPUs, of a model, or anywhere they fit."""
    now = utcnow()
    try:
        wanted = _wanted(body, now)
        with write_session(settings) as sess:
            b = service.create(sess, service.Actor(user.name, user.role == "admin"), wanted, settings, now)
            return view.public(sess, b, now)
    except times.FieldError as exc:
        raise _field(exc) from None
    except service.Forbidden as exc:
        raise HTTPException(403, str(exc)) from None
    except service.Conflict as exc:
        return _conflict(exc)


@router.get("/bookings", response_model=BookingsPublic, operation_id="bookings-list")
def list_bookings(sess: SessionDep, user: CurrentUser, tz: TzQuery = None,
                  mine: Annotated[bool, Query(description="only your own")] = False,
                  since: Annotated[datetime | None, Query(description="meeting this instant or later")] = None,
                  until: Annotated[datetime | None, Query(description="starting before this instant")] = None,
                  released: Annotated[bool, Query(description="cancelled and released ones too")] = False,
                  ) -> BookingsPublic:
    """Bookings not yet over (or from ``since``), by start."""
    now = utcnow()
    try:
        found = service.visible(sess, owner=user.name if mine else None, since=since or now, until=until,
                                live_only=not released)
        data = [view.public(sess, b, now, tz) for b in found]
    except times.FieldError as exc:
        raise _field(exc, "query") from None
    return BookingsPublic(data=data, count=len(data))


@router.get("/free-window", response_model=FreeWindowPublic, operation_id="bookings-free")
def next_free(sess: SessionDep, settings: SettingsDep, user: CurrentUser, gpus: Annotated[int, Query(ge=1, le=1024)],
              hours: Annotated[float, Query(gt=0, le=24 * 366)], host: Annotated[str | None, Query()] = None,
              model: Annotated[str | None, Query()] = None,
              after: Annotated[datetime | None, Query(description="from this instant (default: now)")] = None,
              ) -> FreeWindowPublic:
    """The next window of ``hours`` in which ``gpus`` GPUs (on one host) are free."""
    now = utcnow()
    start = times.ceil_minute(max(after or now, now))
    try:
        ask = service.ask_for(sess, service.Wanted(start, start + timedelta(hours=hours), gpus, host=host,
                                                   model=model))
    except times.FieldError as exc:
        raise _field(exc, "query") from None
    found = windows.next_window(sess, ask, start, start + timedelta(hours=hours),
                                start + timedelta(days=settings.booking_max_ahead_days))
    return FreeWindowPublic(window=BookingWindow(start=found[0], end=found[1]) if found else None)


@router.get("/bookings/{booking_id}", response_model=BookingPublic, operation_id="bookings-get",
            responses=NOT_FOUND)
def get_booking(booking_id: BookingPath, sess: SessionDep, user: CurrentUser, tz: TzQuery = None) -> BookingPublic:
    try:
        return view.public(sess, service.get(sess, booking_id), utcnow(), tz)
    except service.NotFound as exc:
        raise HTTPException(404, str(exc)) from None
    except times.FieldError as exc:
        raise _field(exc, "query") from None


@router.delete("/bookings/{booking_id}", response_model=BookingPublic, operation_id="bookings-cancel",
               responses={**NOT_FOUND, 403: error_response("Not your booking")})
def cancel_booking(booking_id: BookingPath, settings: SettingsDep, user: MemberUser) -> BookingPublic:
    """Cancel a booking: its GPUs are free from now (all of it, when it has not begun)."""
    now = utcnow()
    try:
        with write_session(settings) as sess:
            b = service.cancel(sess, service.Actor(user.name, user.role == "admin"), booking_id, now)
            return view.public(sess, b, now)
    except service.NotFound as exc:
        raise HTTPException(404, str(exc)) from None
    except service.Forbidden as exc:
        raise HTTPException(403, str(exc)) from None
