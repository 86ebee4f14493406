"""How a training's launcher is started: as which account, in which sandbox, with which directories.

:func:`plan` applies the rule of ``gpufleet.users.runas`` and the host's
means (is the worker root, is ``bwrap`` there, ``GPUFLEET_SANDBOX``), and
refuses what may not run: a non-admin's own code (a script) that would run
with the server's privileges, unless an admin opted into shared-account runs
(``GPUFLEET_SHARED_ACCOUNT_RUNS``). :class:`Isolation` then prepares the
training's directories for that account and wraps the launcher's command.
"""

from __future__ import annotations

import logging
import os
import stat
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet import memberfs
from gpufleet.config import CodeSettings, Settings, StoreSettings, WorkerSettings
from gpufleet.jobs import sandbox
from gpufleet.users.runas import RunAccount, RunAsError

log = logging.getLogger(__name__)


class IsolationRefused(RunAsError):
    """This training may not run on this worker as configured; the message says what to set up."""


@dataclass
class Isolation:
    account: RunAccount | None = None  # None: the worker's own account, as before
    sandboxed: bool = False
    write: list[Path] = field(default_factory=list)  # the training's own directories
    # The account's folders that outlive a training (its environment cache): bound read-write, given to it once.
    keep: list[Path] = field(default_factory=list)
    read: list[Path] = field(default_factory=list)
    hidden: list[Path] = field(default_factory=list)
    home: Path | None = None

    @property
    def switches(self) -> bool:
        return self.account is not None and not self.account.is_server

    def prepare(self) -> None:
        """Create the training's directories and give them, and what is in them, to its account."""
        if not self.switches:
            for d in [*self.write, *self.keep]:
                d.mkdir(parents=True, exist_ok=True)
            return
        assert self.account is not None
        uid, gid = self.account.uid, self.account.gid
        for d in self.write:  # never through a link the training's code left in them (gpufleet.memberfs)
            memberfs.hand_over(d, uid, gid)
        for d in self.keep:  # once it is the account's, the account makes all it holds
            memberfs.give_once(d, uid, gid)
            _add_search(d.parent)
        for d in self.hidden:  # the data dir and checkpoint root: the owner may enter (not list) to reach theirs
            _add_search(d)

    def command(self, argv: list[str], binds: list[tuple[Path, Path]] | None = None) -> list[str]:
        """``argv`` as this account, in its sandbox; ``binds``: (folder, where it appears) in that sandbox."""
        if not self.sandboxed:
            return argv
        assert self.account is not None
        home = [self.home] if self.home is not None and self.account.source != "run-account" else []
        return sandbox.bwrap_args(uid=self.account.uid, gid=self.account.gid, groups=self.account.groups,
                                  hidden=self.hidden, read=self.read, write=[*self.write, *self.keep, *home],
                                  binds=binds or []) + argv

    def env(self, env: dict[str, str]) -> dict[str, str]:
        if not self.switches:
            return env
        assert self.account is not None
        # The worker's temporary folder is its own: the account uses the system's (private in the sandbox).
        out = {k: v for k, v in env.items() if k not in ("TMPDIR", "TEMP", "TMP")}
        out.update(USER=self.account.name, LOGNAME=self.account.name)
        if self.home is not None:
            out["HOME"] = str(self.home)
        return out

    def popen_kwargs(self) -> dict[str, Any]:
        if self.sandboxed:
            return {"preexec_fn": sandbox.ignore_sigterm}
        if self.switches:
            assert self.account is not None
            return {"user": self.account.uid, "group": self.account.gid, "extra_groups": list(self.account.groups)}
        return {}


def _add_search(d: Path) -> None:
    try:
        mode = d.stat().st_mode
        d.chmod(stat.S_IMODE(mode) | stat.S_IXOTH | stat.S_IXGRP)
    except OSError:
        pass


def services_without_password(settings: StoreSettings) -> list[str]:
    """The fleet's services a member's code on this host could reach without a password, in words.

    PostgreSQL on a Unix socket is left out: its peer authentication knows the member's code as the
    member's own account, not the server's. Redis has no such thing, so its socket counts too.
    """
    from urllib.parse import parse_qs, urlsplit

    from sqlalchemy.engine import make_url

    out = []
    if settings.redis_url:
        parts = urlsplit(settings.redis_url)
        if not (parts.password or parse_qs(parts.query).get("password")):
            out.append(f"Redis ({parts.scheme}://{parts.hostname or parts.path})")
    if settings.database_url and not settings.database_url.startswith("sqlite"):
        url = make_url(settings.database_url)
        socket_dir = str(url.query.get("host") or "")
        if not url.password and url.host and not socket_dir.startswith("/"):
            out.append(f"PostgreSQL ({url.host}:{url.port or 5432})")
    return out


def _refuse_open_services(store_settings: StoreSettings, worker_settings: WorkerSettings) -> None:
    open_ = [] if worker_settings.allow_services_without_password else services_without_password(store_settings)
    if open_:
        raise IsolationRefused(
            f"members' code is not run on this worker: {' and '.join(open_)} take connections without a password, "
            "and members' code shares this host's network, so it could read and rewrite the queue and the "
            "database; give them passwords (Redis requirepass and redis://:PASSWORD@host, a PostgreSQL role "
            "with a password in GPUFLEET_DATABASE_URL_FILE), or set GPUFLEET_ALLOW_SERVICES_WITHOUT_PASSWORD=true "
            "to accept the risk")


def sandbox_available(settings: CodeSettings) -> bool:
    return settings.sandbox != "off" and sandbox.bwrap_path() is not None and sandbox.setpriv_path() is not None


def plan(settings: Settings, account: RunAccount, member_code: bool, run_dir: Path, checkpoint_dir: Path,
         work_dir: Path | None = None) -> Isolation:
    """How to run a training whose owner's account is ``account`` (``gpufleet.users.runas``);
    ``member_code``: it runs the member's own code (its kind says: gpufleet.jobs.kinds)."""
    write = [run_dir, checkpoint_dir] + ([work_dir] if work_dir is not None else [])
    if account.is_server:
        return Isolation(account=None, write=write)
    if member_code:
        _refuse_open_services(settings, settings)
    if settings.sandbox == "bwrap" and not sandbox_available(settings):
        raise IsolationRefused("GPUFLEET_SANDBOX=bwrap, but bwrap or setpriv is not installed on this host "
                               "(Debian: apt-get install bubblewrap util-linux)")
    if os.geteuid() != 0:
        if member_code and not settings.shared_account_runs:
            raise IsolationRefused(
                f"this worker runs as uid {os.geteuid()}, not root, so it cannot run this member's code as "
                f"Unix account {account.name!r}; run the worker as root (it switches to each owner's account "
                "and sandboxes the ranks), or let an admin set GPUFLEET_SHARED_ACCOUNT_RUNS=true to accept "
                "that members' code runs as the server's account")
        return Isolation(account=None, write=write)
    hidden = [settings.data_dir, Path(settings.checkpoint_root)]  # type: ignore[arg-type]
    read = sandbox.read_paths() + [Path(settings.data_root)]  # type: ignore[arg-type]
    if settings.ca_bundle is not None:  # the lab's authorities, wherever the admin keeps them (/tmp is private)
        read.append(settings.ca_bundle)
    read = [p for p in read if p.exists()]
    home = Path(account.home) if account.home and os.path.isdir(account.home) else None
    if account.source == "run-account" or home is None:
        home = run_dir / "home"
        write.append(home)
    return Isolation(account=account, sandboxed=sandbox_available(settings), write=write, read=read,
                     hidden=hidden, home=home)


def for_owner(settings: Settings, training_id: uuid.UUID, owner: str, member_code: bool, run_dir: Path,
              checkpoint_dir: Path, work_dir: Path | None = None) -> Isolation:
    """:func:`plan` for a training's owner (the account ``gpufleet.users.runas`` maps them to)."""
    from gpufleet.db.session import session_scope
    from gpufleet.users.runas import for_owner as account_of

    with session_scope(settings) as sess:
        account = account_of(sess, settings.run_account, owner)
    iso = plan(settings, account, member_code, run_dir, checkpoint_dir, work_dir)
    if iso.switches:
        log.info("training %s of %s runs as Unix account %s (%s)%s", training_id, owner, account.name,
                 account.source, " in a bwrap sandbox" if iso.sandboxed else "")
    return iso


def startup_warnings(store_settings: StoreSettings, worker_settings: WorkerSettings,
                     code_settings: CodeSettings) -> list[str]:
    """What a worker says at start when members' code is less separated than it could be."""
    out = []
    if code_settings.shared_account_runs:
        out.append("GPUFLEET_SHARED_ACCOUNT_RUNS is on: where this worker cannot switch accounts, members' code "
                   "runs as the server's own account and can read its data dir and secrets")
    elif os.geteuid() != 0:
        out.append(f"this worker runs as uid {os.geteuid()}, not root: members' own code (script trainings) is "
                   "refused here; run the worker as root to run it as each owner's Unix account")
    open_ = services_without_password(store_settings)
    if open_ and not worker_settings.allow_services_without_password:
        out.append(f"{' and '.join(open_)} take connections without a password: members' own code (scripts, "
                   "sessions) is refused here until they have one (GPUFLEET_ALLOW_SERVICES_WITHOUT_PASSWORD)")
    if os.geteuid() == 0 and not sandbox_available(code_settings):
        out.append("members' trainings run as their own Unix accounts but without a sandbox "
                   f"(GPUFLEET_SANDBOX={code_settings.sandbox}; bwrap found: {sandbox.bwrap_path() is not None}): "
                   "their code sees the host's processes; install bubblewrap")
    return out
