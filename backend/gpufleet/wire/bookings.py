"""Bodies of bookings (``/api/v1/bookings``): GPUs held ahead over a window, and a conflict's answer."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from gpufleet.bounds import RequestBody

TIME_HELP = ("ISO 8601, e.g. 2026-12-04T14:00; without an offset it is read in time_zone; whole minutes only")


class BookingCreate(RequestBody):
    start: str = Field(min_length=1, max_length=64, description=f"when it starts: {TIME_HELP}")
    end: str | None = Field(default=None, min_length=1, max_length=64,
                            description=f"when it ends (or give hours): {TIME_HELP}")
    hours: float | None = Field(default=None, gt=0, le=24 * 366, description="how long, instead of end")
    time_zone: str = Field(default="UTC", min_length=1, max_length=64,
                           description="the IANA zone start and end are given in (Europe/Berlin); UTC by default")
    gpus: int = Field(ge=1, le=1024, description="how many GPUs, all on one host")
    host: str | None = Field(default=None, min_length=1, max_length=255, description="on this host (else any)")
    gpu_indices: list[int] | None = Field(default=None, min_length=1, max_length=1024,
                                          description="exactly these GPUs of the host")
    model: str | None = Field(default=None, min_length=1, max_length=255, description="GPUs of this model's name")
    owner: str | None = Field(default=None, min_length=1, max_length=64, description="for whom (admins only)")
    kind: Literal["booking", "maintenance"] = Field(
        default="booking", description="maintenance blocks the GPUs for everyone (admins only)")
    reason: str | None = Field(default=None, max_length=500, description="what it is for, shown to everyone")


class BookedGPU(BaseModel):
    host: str
    index: int


class BookingPublic(BaseModel):
    id: uuid.UUID
    owner: str
    kind: str
    start: datetime
    end: datetime
    # start and end in the zone the reader asked for (?tz=), else the booking's own, e.g. 2026-12-04T14:00+01:00
    start_local: str
    end_local: str
    shown_in: str
    gpu_count: int
    gpus: list[BookedGPU]
    model: str | None = None
    reason: str | None = None
    time_zone: str
    created_by: str
    created_at: datetime
    state: Literal["upcoming", "active", "ended", "released"]
    released_at: datetime | None = None
    release_reason: str | None = None


class BookingsPublic(BaseModel):
    data: list[BookingPublic]
    count: int


class BookingWindow(BaseModel):
    start: datetime
    end: datetime


class BookingInTheWay(BaseModel):
    id: uuid.UUID
    owner: str
    kind: str
    start: datetime
    end: datetime


class BookingConflictPublic(BaseModel):
    """A 409: the booking in the way, and the next window as long that is free for the same ask."""

    detail: str
    in_the_way: BookingInTheWay | None = None
    next_free: BookingWindow | None = None


class FreeWindowPublic(BaseModel):
    window: BookingWindow | None = None


class FeedCreate(RequestBody):
    group: str | None = Field(default=None, min_length=1, max_length=64,
                              description="a team's bookings (a group you are in); else your own")


class FeedCreated(BaseModel):
    """A secret iCalendar feed address; asking again for the same feed gives a new one and ends this one."""

    url: str
    token: str
    group: str | None = None
