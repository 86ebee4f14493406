"""Groups, quotas and usage: who may hold how many GPUs, and who used what.

Groups and quotas are an admin's to change; reading them, and usage, is open
to every signed-in user (a shared fleet is fairer when everyone can see its
rules and who used it).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from fastapi import APIRouter, HTTPException, Path, Query, Response

from gpufleet.api.deps import AdminUser, SessionDep, SettingsDep, ViewerUser
from gpufleet.wire.sharing import (
    GroupCreate,
    GroupPublic,
    GroupQuota,
    GroupQuotaPublic,
    GroupsPublic,
    StoredPublic,
    UsagePublic,
    UsageRowPublic,
    UserQuota,
    UserQuotaPublic,
    UserQuotasPublic,
)
from gpufleet.api.security.openapi import error_response
from gpufleet.api.stored_files import stored_bytes
from gpufleet.api.user_writes import write
from gpufleet.db.session import write_session
from gpufleet.db.types import utcnow
from gpufleet.trainings.service import training_names
from gpufleet.users import groups as g
from gpufleet.users.usage import UsageError, parse_day, row_fields, stored_by, usage_report

router = APIRouter(prefix="/api/v1", tags=["sharing"])
NamePath = Annotated[str, Path(min_length=1, max_length=64, description="a user or group name")]
T = TypeVar("T")
REFUSALS: dict[int | str, dict[str, Any]] = {404: error_response("No such group or user"),
                                             409: error_response("Already so, or not so")}




def _booking_fields(b: g.BookingLimits) -> dict[str, Any]:
    return {"booking_hours_per_week": b.hours_per_week, "booking_max_gpus": b.max_gpus,
            "booking_max_hours": b.max_hours, "booking_max_ahead_days": b.max_ahead_days}


def _booking_limits(body: GroupQuota) -> g.BookingLimits:
    return g.BookingLimits(body.booking_hours_per_week, body.booking_max_gpus, body.booking_max_hours,
                           body.booking_max_ahead_days)


def _group_public(v: g.GroupView) -> GroupPublic:
    q = GroupQuotaPublic(max_gpus=v.limits.max_gpus, gpu_hours_per_week=v.limits.gpu_hours_per_week,
                         max_priority=v.limits.max_priority, max_priority_set_by=v.limits.max_priority_set_by,
                         **_booking_fields(v.limits.bookings))
    return GroupPublic(name=v.name, members=v.members, quota=q)


def _user_public(name: str, q: g.Limits) -> UserQuotaPublic:
    return UserQuotaPublic(user=name, max_gpus=q.max_gpus, gpu_hours_per_week=q.gpu_hours_per_week, share=q.share,
                           max_priority=q.max_priority, max_priority_set_by=q.max_priority_set_by,
                           **_booking_fields(q.bookings))


@router.get("/groups", response_model=GroupsPublic, operation_id="groups-list")
def list_groups(sess: SessionDep, user: ViewerUser) -> GroupsPublic:
    """Every group with its members and quota (anyone signed in may read them; admins change them)."""
    data = [_group_public(v) for v in g.list_groups(sess)]
    return GroupsPublic(data=data, count=len(data))


@router.post("/groups", response_model=GroupPublic, status_code=201, operation_id="groups-create",
             responses=REFUSALS)
def create_group(body: GroupCreate, settings: SettingsDep, user: AdminUser) -> GroupPublic:
    """Create an empty group (admins only)."""
    write(settings, lambda s: g.create_group(s, body.name))
    return GroupPublic(name=body.name, members=[], quota=GroupQuotaPublic())


@router.delete("/groups/{name}", status_code=204, operation_id="groups-delete", responses=REFUSALS)
def delete_group(name: NamePath, settings: SettingsDep, user: AdminUser) -> Response:
    """Delete a group and its quota; its users stay (admins only)."""
    write(settings, lambda s: g.delete_group(s, name))
    return Response(status_code=204)


def _one(settings, name: str) -> GroupPublic:
    with write_session(settings) as sess:
        return _group_public(next(v for v in g.list_groups(sess) if v.name == name))


@router.post("/groups/{name}/members/{member}", response_model=GroupPublic, operation_id="groups-add-member",
             responses=REFUSALS)
def add_member(name: NamePath, member: NamePath, settings: SettingsDep, user: AdminUser) -> GroupPublic:
    """Add a user to a group (admins only); a user already in it is a 409."""
    write(settings, lambda s: g.add_member(s, name, member))
    return _one(settings, name)


@router.delete("/groups/{name}/members/{member}", response_model=GroupPublic, operation_id="groups-remove-member",
               responses=REFUSALS)
def remove_member(name: NamePath, member: NamePath, settings: SettingsDep, user: AdminUser) -> GroupPublic:
    """Take a user out of a group (admins only)."""
    write(settings, lambda s: g.remove_member(s, name, member))
    return _one(settings, name)


@router.put("/groups/{name}/quota", response_model=GroupPublic, operation_id="groups-set-quota",
            responses=REFUSALS)
def set_group_quota(name: NamePath, body: GroupQuota, settings: SettingsDep, user: AdminUser) -> GroupPublic:
    """Replace a group's quota; a null field is no limit, a null max_priority the default (admins only)."""
    limits = g.Limits(body.max_gpus, body.gpu_hours_per_week, max_priority=body.max_priority,
                      bookings=_booking_limits(body))
    write(settings, lambda s: g.set_group_quota(s, name, limits, set_by=user.name))
    return _one(settings, name)


@router.get("/quotas", response_model=UserQuotasPublic, operation_id="quotas-list")
def list_user_quotas(sess: SessionDep, user: ViewerUser) -> UserQuotasPublic:
    """Every user's quota and share set by an admin (anyone signed in may read them)."""
    data = [_user_public(name, q) for name, q in sorted(g.user_quotas(sess).items())]
    return UserQuotasPublic(data=data, count=len(data))


@router.put("/users/{name}/quota", response_model=UserQuotaPublic, operation_id="users-set-quota",
            responses=REFUSALS)
def set_user_quota(name: NamePath, body: UserQuota, settings: SettingsDep, user: AdminUser) -> UserQuotaPublic:
    """Replace a user's quota and share; a null limit is no limit, a null max_priority the default (admins only)."""
    limits = g.Limits(body.max_gpus, body.gpu_hours_per_week, body.share, body.max_priority,
                      bookings=_booking_limits(body))
    return _user_public(name, write(settings, lambda s: g.set_user_quota(s, name, limits, set_by=user.name)))


@router.get("/usage", response_model=UsagePublic, operation_id="usage-get")
def get_usage(
    sess: SessionDep,
    user: ViewerUser,
    by: Annotated[Literal["user", "group", "training"],
                  Query(description="one row per day and user, per day and group, or per day and training")] = "user",
    from_: Annotated[str | None, Query(alias="from", max_length=32, description="first UTC day, YYYY-MM-DD",
                                       json_schema_extra={"format": "date"})] = None,
    to: Annotated[str | None, Query(max_length=32, description="last UTC day, YYYY-MM-DD (default today)",
                                    json_schema_extra={"format": "date"})] = None,
) -> UsagePublic:
    """GPU time per UTC day and user, group or training: held (reserved) and used (weighted by utilisation)."""
    from datetime import timedelta

    try:
        last = parse_day("to", to, utcnow().date())
        first = parse_day("from", from_, last - timedelta(days=6))
        rows = usage_report(sess, by, first, last)
    except UsageError as exc:
        # A query value that is not what it should be, like any other: 422.
        raise HTTPException(422, str(exc)) from None
    names = training_names(sess, [r.name for r in rows]) if by == "training" else {}
    data = [UsageRowPublic.model_validate({"day": r.day, **row_fields(r), "training_name": names.get(r.name)})
            for r in rows]
    held = stored_bytes()
    stored = None
    if held.per_training is not None:
        sums = stored_by(sess, by, held.per_training)
        names = {**names, **training_names(sess, [n for n, _ in sums if n not in names])} if by == "training" else {}
        stored = [StoredPublic(name=n, bytes=b, training_name=names.get(n)) for n, b in sums]
    return UsagePublic(by=by, from_day=first, to_day=last, data=data, count=len(data), store=held.url, stored=stored,
                       stored_error=held.error)
