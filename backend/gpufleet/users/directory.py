"""The team as an admin manages it: each user with role, permissions, tokens and groups.

One read for the admin area's table and one write for its row controls, so a
route neither assembles users from several queries nor changes columns itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpufleet.db.models import User
from gpufleet.users.accounts import UserError, get_user, list_users, set_disabled, set_permission, set_role
from gpufleet.users.groups import groups_of_users
from gpufleet.users.tokens import live_token_counts


@dataclass(frozen=True)
class UserView:
    name: str
    role: str
    disabled: bool
    run_code: bool
    non_preemptible: bool
    unix_account: str | None
    live_tokens: int
    groups: list[str]
    created_at: datetime


@dataclass(frozen=True)
class UserChange:
    """What an admin changes on one user; None leaves a field as it is."""

    role: str | None = None
    disabled: bool | None = None
    run_code: bool | None = None
    non_preemptible: bool | None = None


def _view(user: User, live: dict[str, int], groups: dict[str, list[str]]) -> UserView:
    return UserView(user.name, user.role, user.disabled, user.run_code, user.non_preemptible, user.unix_account,
                    live.get(user.name, 0), groups.get(user.name, []), user.created_at)


def user_views(session: Session) -> list[UserView]:
    live = live_token_counts(session)
    groups = groups_of_users(session)
    return [_view(u, live, groups) for u in list_users(session)]


def user_view(session: Session, name: str) -> UserView:
    user = get_user(session, name)
    return _view(user, live_token_counts(session), groups_of_users(session, [name]))


def _active_admins(session: Session) -> int:
    return session.scalar(select(func.count()).select_from(User)
                          .where(User.role == "admin", User.disabled.is_(False))) or 0


def update_user(session: Session, name: str, change: UserChange) -> UserView:
    """Apply ``change``; the team's last active admin can be neither demoted nor disabled."""
    user = get_user(session, name)
    losing_admin = user.role == "admin" and not user.disabled and (
        (change.role is not None and change.role != "admin") or change.disabled is True)
    if losing_admin and _active_admins(session) <= 1:
        raise UserError(f"{name!r} is the team's last active admin: make another user admin first")
    if change.role is not None:
        set_role(session, name, change.role)
    if change.disabled is not None:
        set_disabled(session, name, change.disabled)
    for permission in ("run_code", "non_preemptible"):
        allowed = getattr(change, permission)
        if allowed is not None:
            set_permission(session, name, permission, allowed)
    session.flush()
    return user_view(session, name)
