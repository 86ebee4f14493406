"""Bodies of groups, quotas and usage."""

from __future__ import annotations

from datetime import date
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gpufleet.bounds import (
    MAX_BOOKING_AHEAD_DAYS,
    MAX_BOOKING_HOURS,
    MAX_GPU_HOURS_LIMIT,
    MAX_GPUS_LIMIT,
    MAX_PRIORITY,
    MAX_SHARE,
    RequestBody,
)

NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"


class GroupCreate(RequestBody):
    name: str = Field(min_length=1, max_length=64, pattern=NAME_PATTERN, description="lowercase group name")


class GroupQuota(RequestBody):
    """A group's limits; a missing or null field is no limit."""

    max_gpus: int | None = Field(default=None, ge=0, le=MAX_GPUS_LIMIT, description="GPUs held at once")
    gpu_hours_per_week: float | None = Field(default=None, ge=0, le=MAX_GPU_HOURS_LIMIT, allow_inf_nan=False,
                                             description="GPU-hours held over a rolling 7 days")
    max_priority: int | None = Field(
        default=None, ge=0, le=MAX_PRIORITY,
        description="the highest priority a member may give a training (a user's own cap wins over their groups',"
                    " else the highest of their groups'); null: the server's default for members")
    # What bookings may hold. A group's counts all its members' bookings together; a member books within her own
    # and every group's of hers. Null: for a user, the server's default (GPUFLEET_BOOKING_*); for a group, none.
    booking_hours_per_week: float | None = Field(
        default=None, ge=0, le=MAX_GPU_HOURS_LIMIT, allow_inf_nan=False,
        description="GPU-hours of bookings starting in one week (UTC, from Monday); null: for a user the server's "
                    "default (GPUFLEET_BOOKING_HOURS_PER_WEEK), for a group no limit")
    booking_max_gpus: int | None = Field(
        default=None, ge=0, le=MAX_GPUS_LIMIT,
        description="GPUs bookings hold at once; null: for a user GPUFLEET_BOOKING_MAX_GPUS, for a group no limit")
    booking_max_hours: float | None = Field(
        default=None, ge=0, le=MAX_BOOKING_HOURS, allow_inf_nan=False,
        description="the longest one booking, in hours; null: for a user GPUFLEET_BOOKING_MAX_HOURS, for a group "
                    "no limit")
    booking_max_ahead_days: float | None = Field(
        default=None, ge=0, le=MAX_BOOKING_AHEAD_DAYS, allow_inf_nan=False,
        description="how many days ahead a booking may start; null: for a user GPUFLEET_BOOKING_MAX_AHEAD_DAYS, "
                    "for a group no limit")


class GroupQuotaPublic(GroupQuota):
    max_priority_set_by: str | None = Field(default=None, description="the admin who set max_priority")


class UserQuota(GroupQuota):
    """A user's limits and fair-share weight."""

    share: float = Field(default=1.0, gt=0, le=MAX_SHARE, allow_inf_nan=False,
                         description="fair-share weight against other users (default 1)")


class GroupPublic(BaseModel):
    name: str
    members: list[str]
    quota: GroupQuotaPublic


class GroupsPublic(BaseModel):
    data: list[GroupPublic]
    count: int


class UserQuotaPublic(UserQuota):
    user: str
    max_priority_set_by: str | None = Field(default=None, description="the admin who set max_priority")


class UserQuotasPublic(BaseModel):
    data: list[UserQuotaPublic]
    count: int


class UsageRowPublic(BaseModel):
    day: date
    name: str = Field(description="the user, the group ('(no group)' for users in none), or the training id")
    gpu_seconds_held: float = Field(description="GPU-seconds reserved (allocation time)")
    gpu_seconds_used: float = Field(description="GPU-seconds weighted by utilisation (telemetry rollups)")
    gpu_hours_held: float
    gpu_hours_used: float
    trainings: int = Field(description="trainings that held a GPU that day")
    gpu_seconds_pool: float = Field(default=0.0, description="the part of gpu_seconds_held on Slurm pools, from "
                                    "Slurm's own accounting (its job's GPUs from its start to its end)")
    gpu_hours_pool: float = 0.0
    gpu_seconds_booked: float = Field(default=0.0, description="GPU-seconds the user's (or the group's members') "
                                      "bookings held that day, up to now: a cancelled or released booking only "
                                      "until then; none by training (a booking is a person's)")
    gpu_hours_booked: float = 0.0
    gpu_seconds_booked_used: float = Field(default=0.0, description="the part of gpu_seconds_booked that the "
                                           "booker's own work held on the booked GPUs")
    gpu_hours_booked_used: float = 0.0
    training_name: str | None = Field(default=None, description="by training: the training's name")


class StoredPublic(BaseModel):
    name: str = Field(description="the user, the group ('(no group)' for users in none), or the training id; "
                      "'(no such training)' for store folders that name no training of this server")
    bytes: int = Field(description="bytes the checkpoint store holds now: checkpoints' files, manifests, latest")
    training_name: str | None = Field(default=None, description="by training: the training's name")


class UsagePublic(BaseModel):
    by: Literal["user", "group", "training"]
    from_day: date = Field(alias="from")
    to_day: date = Field(alias="to")
    data: list[UsageRowPublic]
    count: int
    store: str | None = Field(default=None, description="the checkpoint store (GPUFLEET_CHECKPOINT_STORE); null "
                              "when none is set")
    stored: list[StoredPublic] | None = Field(
        default=None, description="what the checkpoint store holds now (not per day), by the same rows as data, "
        "largest first; null when no store is set or it did not answer (stored_error says why)")
    stored_error: str | None = None

    model_config = ConfigDict(populate_by_name=True)
