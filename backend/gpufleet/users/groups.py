"""Groups of users and the quotas of users and groups.

A group is a name and a set of users; admins manage them like users. A quota
limits one user or one group: the GPUs it may hold at once and, optionally,
the GPU-hours it may hold over a rolling week. A user's quota also carries
its fair-share weight (``share``, default 1). The scheduler reads these in
:mod:`gpufleet.scheduling.quotas` and :mod:`gpufleet.scheduling.fairshare`.

Every function takes an open session and leaves committing to the caller; a
refused change raises :class:`UserError` before anything is written.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from gpufleet.db.models import Group, GroupMember, Quota, User
from gpufleet.users.accounts import UserError, check_name, get_user

# Bounds the database and the scheduler can hold; past them a value is a typo.
MAX_GPUS_LIMIT = 100_000
MAX_GPU_HOURS_LIMIT = 10_000_000.0
MAX_SHARE = 1_000_000.0
DEFAULT_SHARE = 1.0


@dataclass(frozen=True)
class Limits:
    """What a quota says; ``None`` is no limit."""

    max_gpus: int | None = None
    gpu_hours_per_week: float | None = None
    share: float = DEFAULT_SHARE


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
        raise UserError(f"GPU-hours per week must be between 0 and {MAX_GPU_HOURS_LIMIT:.0f} (or no limit), not {hours}")
    if not (math.isfinite(limits.share) and 0 < limits.share <= MAX_SHARE):
        raise UserError(f"share must be above 0 and at most {MAX_SHARE:.0f}, not {limits.share}")
    return limits


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
    gone = session.execute(
        delete(GroupMember).where(GroupMember.group_id == group.id, GroupMember.user_id == user.id)
    ).rowcount
    if not gone:
        raise UserError(f"user {user_name!r} is not in group {group_name!r}")


def _limits(q: Quota | None) -> Limits:
    if q is None:
        return Limits()
    return Limits(q.max_gpus, q.gpu_hours_per_week, q.share if q.share is not None else DEFAULT_SHARE)


def _set(session: Session, where: dict, limits: Limits) -> Limits:
    check_limits(limits)
    q = session.scalars(select(Quota).filter_by(**where)).one_or_none()
    if q is None:
        q = Quota(**where)
        session.add(q)
    q.max_gpus, q.gpu_hours_per_week, q.share = limits.max_gpus, limits.gpu_hours_per_week, limits.share
    session.flush()
    return limits


def set_user_quota(session: Session, user_name: str, limits: Limits) -> Limits:
    return _set(session, {"user_id": get_user(session, user_name).id}, limits)


def set_group_quota(session: Session, group_name: str, limits: Limits) -> Limits:
    if limits.share != DEFAULT_SHARE:
        raise UserError("a share is set per user (fair-share weighs users); leave it out of a group's quota")
    return _set(session, {"group_id": get_group(session, group_name).id}, limits)


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
        groups[q.group_id].limits = _limits(q)
    return list(groups.values())


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
