"""Users and their roles in the database.

A user is a name and a role: ``admin`` (everything), ``member`` (creates
trainings, cancels their own) or ``viewer`` (reads only). ``local`` is the
implicit admin of a loopback server without sign-in and never a row.
"""

from __future__ import annotations

import re

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.db.models import User
from gpufleet.users.signin import end_sessions

ROLES = ("admin", "member", "viewer")
# Roles that may change things (create trainings, cancel their own); viewers only read.
WRITING_ROLES = frozenset({"admin", "member"})
# Permissions an admin grants a user (admins have every one): the User column and what it allows.
PERMISSIONS = {
    "run_code": "run their own code (script trainings)",
    "non_preemptible": "ask for trainings that no higher-priority one may preempt",
}
# The implicit user of a loopback server without sign-in; never a database row.
LOCAL_USER_NAME = "local"
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")


class UserError(ValueError):
    """A user or token operation cannot be done; the message says why."""


def may_write(role: str) -> bool:
    return role in WRITING_ROLES


def check_name(kind: str, name: str) -> str:
    """The naming rule users and groups share; ``kind`` ("user", "group") words the refusal."""
    if not _NAME.match(name):
        raise UserError(
            f"{kind} name {name!r} is not allowed: use 1-64 lowercase letters, digits, '.', '_' or '-',"
            " starting with a letter or digit"
        )
    return name


def check_user_name(name: str) -> str:
    check_name("user", name)
    if name == LOCAL_USER_NAME:
        raise UserError(f"user name {LOCAL_USER_NAME!r} is reserved for the loopback server's implicit admin")
    return name


def check_role(role: str) -> str:
    if role not in ROLES:
        raise UserError(f"role {role!r} is not one of {', '.join(ROLES)}")
    return role


def get_user(session: Session, name: str) -> User:
    user = session.scalars(select(User).where(User.name == name)).one_or_none()
    if user is None:
        raise UserError(f"no user named {name!r} yet: one with an account on this machine is made on their first "
                        f"call (they run any gpufleet command, such as `gpufleet whoami`); or add one with "
                        f"`gpufleet users add {name}`")
    return user


def add_user(session: Session, name: str, role: str = "member") -> User:
    check_user_name(name)
    check_role(role)
    if session.scalars(select(User.id).where(User.name == name)).first() is not None:
        raise UserError(f"user {name!r} already exists")
    user = User(name=name, role=role, disabled=False)
    session.add(user)
    session.flush()
    return user


def list_users(session: Session) -> list[User]:
    return list(session.scalars(select(User).order_by(User.name)))


def set_disabled(session: Session, name: str, disabled: bool = True) -> User:
    """Disable (or enable) a user: a disabled user's tokens and sessions stop working at once."""
    user = get_user(session, name)
    user.disabled = disabled
    if disabled:
        # Ended, not only refused: enabling the user again must not bring old cookies back.
        end_sessions(session, user_id=user.id)
    return user


def set_role(session: Session, name: str, role: str) -> User:
    check_role(role)
    user = get_user(session, name)
    user.role = role
    return user


def set_permission(session: Session, name: str, permission: str, allowed: bool) -> User:
    """Grant (or take back) one of :data:`PERMISSIONS`."""
    if permission not in PERMISSIONS:
        raise UserError(f"unknown permission {permission!r}; known: {', '.join(PERMISSIONS)}")
    user = get_user(session, name)
    setattr(user, permission, allowed)
    return user
