"""Groups of users and the quotas of users and groups.

A group is a name and a set of users; admins manage them like users. A quota
limits one user or one group: the GPUs it may hold at once, optionally the
GPU-hours it may hold over a rolling week, and the highest priority its
trainings may ask for (:func:`priority_cap`; the quota records which admin set
it). A user's quota also carries its fair-share weight (``share``, default 1). The scheduler reads these in
:mod:`gpufleet.scheduling.quotas` and :mod:`gpufleet.scheduling.fairshare`. A quota's booking limits
(:class:`BookingLimits`) are what :mod:`gpufleet.bookings.service` lets a member book.

Every function takes an open session and leaves committing to the caller; a
refused change raises :class:`UserError` before anything is written.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from gpufleet.bounds import (
    MAX_BOOKING_AHEAD_DAYS,
    MAX_BOOKING_HOURS,
    MAX_GPU_HOURS_LIMIT,
    MAX_GPUS_LIMIT,
    MAX_PRIORITY,
    MAX_SHARE,
)
from gpufleet.db.models import Group, GroupMember, Quota, User
from gpufleet.db.session import rows_changed
from gpufleet.users.accounts import UserError, check_name, get_user

DEFAULT_SHARE = 1.0


@dataclass(frozen=True)
class BookingLimits:
    """What a user's or a group's bookings may hold; ``None``: for a user the server's default, for a group none.

    A group's limit counts the bookings of all its members together, as its quota counts their work.
    """

    hours_per_week: float | None = None  # GPU-hours booked in one week (UTC, Monday on) of the bookings' starts
    max_gpus: int | None = None  # GPUs booked at once
    max_hours: float | None = None  # the longest one booking
    max_ahead_days: float | None = None  # the furthest ahead a booking starts

    def any(self) -> bool:
        return any(v is not None for v in (self.hours_per_week, self.max_gpus, self.max_hours, self.max_ahead_days))


@dataclass(frozen=True)
class Limits:
    """What a quota says; ``None`` is no limit."""

    max_gpus: int | None = None
    gpu_hours_per_week: float | None = None
    share: float = DEFAULT_SHARE
    # The highest priority its trainings may ask for; None: a member's default (GPUFLEET_MEMBER_MAX_PRIORITY).
    max_priority: int | None = None
    # Who set max_priority (read back; what a change records is the caller's name).
    max_priority_set_by: str | None = None
    bookings: BookingLimits = field(default_factory=BookingLimits)


@dataclass
class GroupView:
    name: str
    members: list[str] = field(default_factory=list)
    limits: Limits = field(default_factory=Limits)


def check_group_name(name: str) -> str:
    return check_name("group", name)


def check_limits(limits: Limits) -> Limits:
    """Refuse a negative, non-finite or absurd quota, naming the field to fix."""
    if limits.max_gpus is not None and not 0 <= limits.max_gpus <= MAX_GPUS_LIMIT:
        raise UserError(f"max GPUs must be between 0 and {MAX_GPUS_LIMIT} (or no limit), not {limits.max_gpus}")
    hours = limits.gpu_hours_per_week
    if hours is not None and not (math.isfinite(hours) and 0 <= hours <= MAX_GPU_HOURS_LIMIT):
        raise UserError(f"GPU-hours per week must be between 0 and {MAX_GPU_HOURS_LIMIT:.0f} (or no limit), "
                        f"not {hours}")
    if not (math.isfinite(limits.share) and 0 < limits.share <= MAX_SHARE):
        raise UserError(f"share must be above 0 and at most {MAX_SHARE:.0f}, not {limits.share}")
    if limits.max_priority is not None and not 0 <= limits.max_priority <= MAX_PRIORITY:
        raise UserError(f"max priority must be between 0 and {MAX_PRIORITY} (or none: the default for members),"
                        f" not {limits.max_priority}")
    _check_booking_limits(limits.bookings)
    return limits


def _check_booking_limits(b: BookingLimits) -> None:
    if b.max_gpus is not None and not 0 <= b.max_gpus <= MAX_GPUS_LIMIT:
        raise UserError(f"booked GPUs at once must be between 0 and {MAX_GPUS_LIMIT} (or none), not {b.max_gpus}")
    for what, value, top in (("booked GPU-hours per week", b.hours_per_week, MAX_GPU_HOURS_LIMIT),
                             ("the longest booking (hours)", b.max_hours, MAX_BOOKING_HOURS),
                             ("the furthest ahead a booking starts (days)", b.max_ahead_days, MAX_BOOKING_AHEAD_DAYS)):
        if value is not None and not (math.isfinite(value) and 0 <= value <= top):
            raise UserError(f"{what} must be between 0 and {top:g} (or none), not {value}")


def get_group(session: Session, name: str) -> Group:
    group = session.scalars(select(Group).where(Group.name == name)).one_or_none()
    if group is None:
        raise UserError(f"no group named {name!r}; create it with `gpufleet groups create {name}`")
    return group


def create_group(session: Session, name: str) -> Group:
    check_group_name(name)
    if session.scalars(select(Group.id).where(Group.name == name)).first() is not None:
        raise UserError(f"group {name!r} already exists")
    group = Group(name=name)
    session.add(group)
    session.flush()
    return group


def delete_group(session: Session, name: str) -> None:
    """Delete a group, its memberships and its quota (the users stay)."""
    group = get_group(session, name)
    session.execute(delete(GroupMember).where(GroupMember.group_id == group.id))
    session.execute(delete(Quota).where(Quota.group_id == group.id))
    session.delete(group)
    session.flush()


def add_member(session: Session, group_name: str, user_name: str) -> None:
    group = get_group(session, group_name)
    user = get_user(session, user_name)
    exists = select(GroupMember.id).where(GroupMember.group_id == group.id, GroupMember.user_id == user.id)
    if session.scalars(exists).first() is not None:
        raise UserError(f"user {user_name!r} is already in group {group_name!r}")
    session.add(GroupMember(group_id=group.id, user_id=user.id))
    session.flush()


def remove_member(session: Session, group_name: str, user_name: str) -> None:
    group = get_group(session, group_name)
    user = get_user(session, user_name)
    gone = rows_changed(session.execute(
        delete(GroupMember).where(GroupMember.group_id == group.id, GroupMember.user_id == user.id)
    ))
    if not gone:
        raise UserError(f"user {user_name!r} is not in group {group_name!r}")


def _limits(q: Quota | None) -> Limits:
    if q is None:
        return Limits()
    return Limits(q.max_gpus, q.gpu_hours_per_week, q.share if q.share is not None else DEFAULT_SHARE,
                  q.max_priority, q.max_priority_set_by, booking_limits(q))


def booking_limits(q: Quota) -> BookingLimits:
    return BookingLimits(q.booking_hours_per_week, q.booking_max_gpus, q.booking_max_hours, q.booking_max_ahead_days)


def _set(session: Session, where: dict, limits: Limits, set_by: str | None) -> Limits:
    check_limits(limits)
    q = session.scalars(select(Quota).filter_by(**where)).one_or_none()
    if q is None:
        q = Quota(**where)
        session.add(q)
    q.max_gpus, q.gpu_hours_per_week, q.share = limits.max_gpus, limits.gpu_hours_per_week, limits.share
    b = limits.bookings
    q.booking_hours_per_week, q.booking_max_gpus = b.hours_per_week, b.max_gpus
    q.booking_max_hours, q.booking_max_ahead_days = b.max_hours, b.max_ahead_days
    if q.max_priority != limits.max_priority:
        # Who raised (or lowered) a cap is what a refused member is told.
        q.max_priority, q.max_priority_set_by = limits.max_priority, set_by if limits.max_priority is not None else None
    session.flush()
    return _limits(q)


def set_user_quota(session: Session, user_name: str, limits: Limits, set_by: str | None = None) -> Limits:
    """Replace a user's quota; ``set_by`` (an admin's name) is recorded when the priority cap changes."""
    return _set(session, {"user_id": get_user(session, user_name).id}, limits, set_by)


def set_group_quota(session: Session, group_name: str, limits: Limits, set_by: str | None = None) -> Limits:
    if limits.share != DEFAULT_SHARE:
        raise UserError("a share is set per user (fair-share weighs users); leave it out of a group's quota")
    return _set(session, {"group_id": get_group(session, group_name).id}, limits, set_by)


@dataclass(frozen=True)
class PriorityCap:
    """The highest priority a member's trainings may ask for, where it comes from, and who set it."""

    value: int
    source: str
    set_by: str | None = None

    def describe(self) -> str:
        return f"{self.source}, set by {self.set_by}" if self.set_by else self.source


def priority_cap(session: Session, user_name: str, default: int) -> PriorityCap:
    """A member's cap: their own quota's, else the highest of their groups', else ``default``.

    A cap is never below 0 (the default priority), so only a request above 0 needs to ask.
    """
    own = session.execute(select(Quota.max_priority, Quota.max_priority_set_by).join(User, User.id == Quota.user_id)
                          .where(User.name == user_name, Quota.max_priority.is_not(None))).first()
    if own is not None and own[0] is not None:
        return PriorityCap(own[0], f"the cap of user {user_name!r}", own[1])
    best = session.execute(
        select(Quota.max_priority, Quota.max_priority_set_by, Group.name)
        .join(Group, Group.id == Quota.group_id).join(GroupMember, GroupMember.group_id == Group.id)
        .join(User, User.id == GroupMember.user_id)
        .where(User.name == user_name, Quota.max_priority.is_not(None))
        .order_by(Quota.max_priority.desc(), Group.name).limit(1)
    ).first()
    if best is not None and best[0] is not None:
        return PriorityCap(best[0], f"the cap of group {best[2]!r}", best[1])
    return PriorityCap(default, "the default for members (GPUFLEET_MEMBER_MAX_PRIORITY)")


def user_limits(session: Session, user_name: str) -> Limits:
    user = get_user(session, user_name)
    return _limits(session.scalars(select(Quota).where(Quota.user_id == user.id)).one_or_none())


def list_groups(session: Session) -> list[GroupView]:
    groups = {g.id: GroupView(g.name) for g in session.scalars(select(Group).order_by(Group.name))}
    for gid, uname in session.execute(
        select(GroupMember.group_id, User.name).join(User, User.id == GroupMember.user_id).order_by(User.name)
    ):
        groups[gid].members.append(uname)
    for q in session.scalars(select(Quota).where(Quota.group_id.is_not(None))):
        if q.group_id is not None:
            groups[q.group_id].limits = _limits(q)
    return list(groups.values())


def group_quotas_of(session: Session, user_name: str) -> list[tuple[str, Quota, list[str]]]:
    """(group name, its quota, its members' names) for each group of ``user_name`` that has a quota, by name."""
    rows = session.execute(
        select(Group.id, Group.name, Quota)
        .join(GroupMember, GroupMember.group_id == Group.id)
        .join(User, User.id == GroupMember.user_id)
        .join(Quota, Quota.group_id == Group.id)
        .where(User.name == user_name)
        .order_by(Group.name)
    ).all()
    return [(gname, quota, list(session.scalars(
        select(User.name).join(GroupMember, GroupMember.user_id == User.id).where(GroupMember.group_id == gid))))
        for gid, gname, quota in rows]


def user_quotas(session: Session) -> dict[str, Limits]:
    """User name -> its quota, for every user that has one."""
    rows = session.execute(select(User.name, Quota).join(Quota, Quota.user_id == User.id))
    return {name: _limits(q) for name, q in rows}


def groups_of_users(session: Session, names: list[str] | None = None) -> dict[str, list[str]]:
    """User name -> the names of its groups (users in no group are left out)."""
    stmt = (
        select(User.name, Group.name)
        .join(GroupMember, GroupMember.user_id == User.id)
        .join(Group, Group.id == GroupMember.group_id)
        .order_by(Group.name)
    )
    if names is not None:
        stmt = stmt.where(User.name.in_(names))
    out: dict[str, list[str]] = {}
    for user, group in session.execute(stmt):
        out.setdefault(user, []).append(group)
    return out
