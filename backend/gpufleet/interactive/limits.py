"""The longest a session may last: an admin's maximum for its owner, else for a group of theirs, else the setting."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.config import SessionSettings
from gpufleet.db.interactive import SessionLimit
from gpufleet.db.models import User
from gpufleet.db.sharing import Group, GroupMember
from gpufleet.trainings.admission.checks import TrainingRequestError


@dataclass(frozen=True)
class MaxHours:
    hours: float
    source: str  # for messages: "set for user alice", "set for group vision", "GPUFLEET_SESSION_MAX_HOURS"


def max_hours_for(sess: Session, settings: SessionSettings, owner: str) -> MaxHours:
    """The owner's own maximum, else their groups' highest, else ``session_max_hours``."""
    own = sess.scalar(select(SessionLimit.max_hours).where(SessionLimit.subject_kind == "user",
                                                           SessionLimit.subject == owner))
    if own is not None:
        return MaxHours(own, f"set for user {owner}")
    groups = sess.execute(
        select(SessionLimit.subject, SessionLimit.max_hours)
        .join(Group, Group.name == SessionLimit.subject)
        .join(GroupMember, GroupMember.group_id == Group.id)
        .join(User, User.id == GroupMember.user_id)
        .where(SessionLimit.subject_kind == "group", User.name == owner)
        .order_by(SessionLimit.max_hours.desc())).first()
    if groups is not None:
        return MaxHours(groups[1], f"set for group {groups[0]}")
    return MaxHours(settings.session_max_hours, "GPUFLEET_SESSION_MAX_HOURS")


def set_limit(sess: Session, kind: str, name: str, max_hours: float, set_by: str) -> SessionLimit:
    """An admin sets the maximum for a user or a group that exists (404 otherwise)."""
    model = User if kind == "user" else Group
    if sess.scalar(select(model.id).where(model.name == name)) is None:
        raise TrainingRequestError("name", f"{kind} {name!r} does not exist", status=404)
    row = sess.scalar(select(SessionLimit).where(SessionLimit.subject_kind == kind, SessionLimit.subject == name))
    if row is None:
        row = SessionLimit(subject_kind=kind, subject=name, max_hours=max_hours, set_by=set_by)
        sess.add(row)
    else:
        row.max_hours, row.set_by = max_hours, set_by
    sess.flush()
    return row


def list_limits(sess: Session) -> list[SessionLimit]:
    return list(sess.scalars(select(SessionLimit).order_by(SessionLimit.subject_kind, SessionLimit.subject)))
