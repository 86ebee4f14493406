"""Local callers: the Unix account behind a connection to the server's socket, as a gpufleet user.

The kernel tells the server which uid opened the connection (``SO_PEERCRED``),
so no header or body can change who a socket caller is. Root and the account
the server runs as are admins; any other account is the gpufleet user of its
own name, a member made on its first call, whose role an admin may change or
which an admin may disable, as for any user.
"""

from __future__ import annotations

import os
import pwd
import uuid

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpufleet.db.models import User
from gpufleet.users.accounts import LOCAL_USER_NAME, UserError, check_user_name
from gpufleet.users.tokens import TokenOwner

def is_admin_account(uid: int, server_uid: int | None = None) -> bool:
    """Root and the account the server runs as administer it."""
    return uid == 0 or uid == (os.geteuid() if server_uid is None else server_uid)


def account_name(uid: int) -> str:
    """The login name of ``uid``; :class:`UserError` when it has none or it cannot be a user name."""
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        raise UserError(f"uid {uid} has no account name on this machine, so it cannot be a gpufleet user") from None
    if name == LOCAL_USER_NAME:
        raise UserError(f"the account {name!r} has the reserved name of single-user mode's admin; use a token")
    try:
        return check_user_name(name)
    except UserError as exc:
        raise UserError(f"the account {name!r} cannot be a gpufleet user ({exc}); use a token instead") from None


def local_account_user(session: Session, uid: int, server_uid: int | None = None, *,
                       create: bool = True, run_account: str | None = None) -> TokenOwner | None:
    """Who the account ``uid`` acts as: its user, made on first use (a member; an admin for root and the
    server's account, who stay admins whatever their row says, so no one can lock the machine's owner out).

    With ``create=False`` a missing user is None (a read-only first look).
    Raises :class:`UserError` when the account cannot be a user, is
    ``run_account`` (the account members' trainings run as, whose callers
    may be any of them) or its user is disabled. Leaves committing to the caller.
    """
    name = account_name(uid)
    admin = is_admin_account(uid, server_uid)
    if name == run_account and not admin:
        raise UserError(f"the account {name!r} is the one members' trainings run as (GPUFLEET_RUN_ACCOUNT), so "
                        "its callers may be anyone's code: it is no gpufleet user; use a token")
    user = session.scalars(select(User).where(User.name == name)).one_or_none()
    if user is None:
        if not create:
            return None
        try:
            with session.begin_nested():
                user = User(name=name, role="admin" if admin else "member", disabled=False)
                session.add(user)
        except IntegrityError:
            # Another first call made it at the same moment.
            user = session.scalars(select(User).where(User.name == name)).one()
    if user.disabled and not admin:
        raise UserError(f"user {name!r} is disabled; an admin enables it with `gpufleet users enable {name}`")
    # No token: a session opened from here lasts while the user stays enabled.
    return TokenOwner(user.id, user.name, "admin" if admin else user.role, uuid.UUID(int=0))


_NO_LOGIN_SHELLS = ("nologin", "false", "sync", "halt", "shutdown")


def human_accounts() -> list[str]:
    """Accounts people log in with: uid 1000 or more (not ``nobody``) and a login shell."""
    return sorted(
        entry.pw_name for entry in pwd.getpwall()
        if 1000 <= entry.pw_uid < 65534 and entry.pw_shell and not entry.pw_shell.endswith(_NO_LOGIN_SHELLS)
    )
