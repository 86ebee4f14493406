"""Which Unix account a user's trainings run as: one rule, in one place.

A member's code must never run with the server's privileges (Slurm runs a
job as its submitter; JupyterHub spawns each server as its user). In order:

1. ``mapped``: the account an admin mapped the user to
   (``gpufleet users map NAME --unix ACCOUNT``, ``PUT /api/v1/users/{name}/unix-account``);
2. ``same-name``: a login account with the user's own name (how local
   accounts arrive), when one exists;
3. ``server``: for admins (and trainings with no user row: the implicit local
   admin's), the server's own account: they own the server already;
4. ``run-account``: for everyone else, the one unprivileged account for
   gpufleet's runs (``GPUFLEET_RUN_ACCOUNT``, default ``gpufleet-run``).

Never root, and never the server's own account for anyone but an admin.
"""

from __future__ import annotations

import logging
import os
import pwd
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.db.models import User
from gpufleet.users.accounts import UserError, get_user

# Mappings are recorded here (who, which user, which account, whose it was), whether refused or forced.
audit = logging.getLogger("gpufleet.audit")

# Accounts below this uid are the system's own (daemon, bin, www-data ...): a
# gpufleet user who happens to share such a name is not that account.
LOGIN_UID_MIN = 1000
SETUP_HINT = ("create it with `useradd --system --user-group --home-dir /nonexistent --shell /usr/sbin/nologin "
              "{name}`, or name another with GPUFLEET_RUN_ACCOUNT")


class RunAsError(UserError):
    """No account the rule allows can run this user's training; the message says what to set up."""


@dataclass(frozen=True)
class RunAccount:
    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str
    source: str  # mapped | same-name | server | run-account

    @property
    def is_server(self) -> bool:
        return self.uid == os.geteuid()


def _entry(name: str) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        return None


def _account(entry: pwd.struct_passwd, source: str) -> RunAccount:
    groups = tuple(sorted(set(os.getgrouplist(entry.pw_name, entry.pw_gid)) - {entry.pw_gid}))
    return RunAccount(entry.pw_name, entry.pw_uid, entry.pw_gid, groups, entry.pw_dir, source)


def _refuse_privileged(entry: pwd.struct_passwd, admin: bool, what: str) -> None:
    if entry.pw_uid == 0:
        raise RunAsError(f"{what} {entry.pw_name!r} is root; trainings never run as root")
    if entry.pw_uid == os.geteuid() and not admin:
        raise RunAsError(f"{what} {entry.pw_name!r} is the server's own account; only an admin's trainings run as it")


def check_mapping(account: str) -> str:
    """An account an admin may map a user to: never root. (Whether it exists is the worker host's
    question: a fleet's API host need not have its workers' accounts.)"""
    entry = _entry(account)
    if account == "root" or (entry is not None and entry.pw_uid == 0):
        raise UserError(f"Unix account {account!r} is root; trainings never run as root")
    return account


def exists_here(account: str) -> bool:
    return _entry(account) is not None


def account_holders(session: Session, account: str, but: str) -> list[str]:
    """The gpufleet users other than ``but`` whose trainings run as ``account``: the user of that very
    name (its same-name account) and users mapped to it."""
    rows = session.execute(select(User.name).where(User.name != but, (User.name == account)
                                                   | (User.unix_account == account))).scalars()
    return sorted(set(rows))


def set_mapping(session: Session, name: str, account: str | None, force: bool = False, by: str = "cli") -> User:
    """Map user ``name`` to Unix ``account`` (None: back to the rule's fallbacks).

    An account that belongs to another gpufleet user (of that name, or mapped to it) would let ``name``'s
    code read and write that user's files: refused unless ``force``; either way it is recorded.
    """
    user = get_user(session, name)
    if account:
        check_mapping(account)
        holders = account_holders(session, account, name)
        if holders and not force:
            audit.warning("refused: %s asked to map user %s to Unix account %s, which is %s's", by, name, account,
                          ", ".join(holders))
            raise UserError(f"Unix account {account!r} belongs to gpufleet user {', '.join(holders)}: {name}'s"
                            f" trainings would run as them and reach their files; give force (--force) if that"
                            " is meant")
        audit.warning("%s mapped user %s to Unix account %s%s", by, name, account,
                      f" (forced over {', '.join(holders)})" if holders else "")
    else:
        audit.warning("%s cleared the Unix account mapping of user %s", by, name)
    user.unix_account = account or None
    return user


def resolve(run_account: str, owner: str, role: str | None, mapped: str | None) -> RunAccount:
    """The account for ``owner``'s trainings (``role`` None: the owner has no user row)."""
    admin = role in (None, "admin")
    if mapped:
        entry = _entry(mapped)
        if entry is None:
            raise RunAsError(f"user {owner!r} is mapped to Unix account {mapped!r}, which does not exist on "
                             "this host; create it or change the mapping (`gpufleet users map`)")
        _refuse_privileged(entry, admin, f"user {owner!r} is mapped to Unix account")
        return _account(entry, "mapped")
    own = _entry(owner)
    if own is not None and own.pw_uid >= LOGIN_UID_MIN and own.pw_uid != os.geteuid():
        return _account(own, "same-name")
    if admin:
        # An admin owns the server already: their trainings run as its account, as they always did.
        return _account(pwd.getpwuid(os.geteuid()), "server")
    entry = _entry(run_account)
    if entry is None:
        raise RunAsError(f"user {owner!r} has no Unix account on this host and the run account "
                         f"{run_account!r} does not exist; " + SETUP_HINT.format(name=run_account))
    _refuse_privileged(entry, False, "the run account")
    return _account(entry, "run-account")


def for_owner(session: Session, run_account: str, owner: str) -> RunAccount:
    """:func:`resolve` for a training's owner, reading the user's role and mapping."""
    row = session.execute(select(User.role, User.unix_account).where(User.name == owner)).one_or_none()
    return resolve(run_account, owner, row.role if row else None, row.unix_account if row else None)
