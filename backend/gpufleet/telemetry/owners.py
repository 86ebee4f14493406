"""Which gpufleet training owns a process on a GPU, and who runs it.

A process belongs to a training when (first rule that answers wins):

1. the process or one of its ancestors is a running training's launcher
   (``trainings.launcher_pid``, set by the worker when it starts the launcher;
   the ranks are ``mp.spawn`` children of the launcher);
2. its environment holds ``GPUFLEET_TRAINING_ID`` (the launcher's environment,
   inherited by the ranks; readable for our own user's processes, or as root);
3. the device backend noted the training when the worker started it
   (``DeviceBackend.training_started``; the simulator keeps such a registry,
   real drivers need none);
4. it runs as the Unix account of a running session's owner on one of that
   session's GPUs (a shell or notebook the owner opened beside the session).

Everything else is foreign. Launcher pids are read from the database every few
seconds (only trainings on this host that are scheduled or running).
"""

from __future__ import annotations

import logging
import pwd
import time
import uuid
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.config import CodeSettings, HostSettings, StoreSettings
from gpufleet.db.interactive import TrainingSession
from gpufleet.db.models import ACTIVE_STATUSES, GPUAllocation, Host, Training
from gpufleet.db.session import session_scope
from gpufleet.users.runas import RunAsError, for_owner

log = logging.getLogger(__name__)

ENV_VAR = "GPUFLEET_TRAINING_ID"
PROC = Path("/proc")


def parent_pid(pid: int) -> int | None:
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name may hold spaces and parentheses; fields follow the last ')'.
    fields = stat.rpartition(")")[2].split()
    try:
        return int(fields[1])
    except (IndexError, ValueError):
        return None


def process_user(pid: int) -> str | None:
    try:
        for line in (PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith("Uid:"):
                uid = int(line.split()[1])
                try:
                    return pwd.getpwuid(uid).pw_name
                except KeyError:
                    return str(uid)
    except (OSError, ValueError, IndexError):
        return None
    return None


def process_command(pid: int) -> str | None:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    cmd = raw.replace(b"\0", b" ").decode(errors="replace").strip()
    return cmd[:200] or None


def env_training_id(pid: int) -> uuid.UUID | None:
    try:
        raw = (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    for item in raw.split(b"\0"):
        if item.startswith(ENV_VAR.encode() + b"="):
            try:
                return uuid.UUID(item.split(b"=", 1)[1].decode())
            except ValueError:
                return None
    return None


class TrainingOwners:
    """Maps pids to trainings; refreshes the launcher pids from the database."""

    def __init__(self, store_settings: StoreSettings, host_settings: HostSettings, code_settings: CodeSettings,
                 refresh_s: float = 5.0) -> None:
        self.store_settings, self.host_settings, self.code_settings = store_settings, host_settings, code_settings
        self.refresh_s = refresh_s
        self._launchers: dict[int, uuid.UUID] = {}
        self._session_gpus: dict[int, tuple[uuid.UUID, str]] = {}  # GPU index -> (session, its Unix account)
        self._loaded_at = -1e9
        self._warned = False

    def _refresh(self) -> None:
        now = time.monotonic()
        if now - self._loaded_at < self.refresh_s:
            return
        self._loaded_at = now
        try:
            with session_scope(self.store_settings) as sess:
                rows = sess.execute(
                    select(Training.launcher_pid, Training.id)
                    .join(Host, Host.id == Training.host_id)
                    .where(Host.name == self.host_settings.host_name, Training.status.in_(ACTIVE_STATUSES),
                           Training.launcher_pid.is_not(None))
                ).all()
                self._session_gpus = _session_gpus(sess, self.host_settings, self.code_settings)
            self._launchers = {int(pid): tid for pid, tid in rows if pid is not None}
            self._warned = False
        except Exception as exc:  # noqa: BLE001 - keep the last known map while the database is away
            if not self._warned:
                log.warning("cannot read training launchers (keeping the last known): %s", exc)
                self._warned = True

    def set_launchers(self, launchers: dict[int, uuid.UUID]) -> None:
        """Replace the launcher map (tests, and callers that already know it)."""
        self._launchers = dict(launchers)
        self._loaded_at = time.monotonic()

    def owner(self, pid: int, noted_training: str | None = None, gpu: int | None = None,
              user: str | None = None) -> uuid.UUID | None:
        """The training ``pid`` belongs to; ``noted_training`` is what the device backend noted for it;
        ``gpu`` and ``user`` (the GPU it was seen on, its account) find a session's own processes."""
        self._refresh()
        p: int | None = pid
        for _ in range(64):  # an ancestor chain is short; never loop forever
            if p is None or p <= 1:
                break
            if p in self._launchers:
                return self._launchers[p]
            p = parent_pid(p)
        tid = env_training_id(pid) if pid < (1 << 22) else None
        if tid is not None:
            return tid
        if noted_training:
            try:
                return uuid.UUID(noted_training)
            except ValueError:
                return None
        held = self._session_gpus.get(gpu) if gpu is not None else None
        if held is not None and user is not None and user == held[1]:
            return held[0]
        return None


def _session_gpus(sess: Session, host_settings: HostSettings,
                  code_settings: CodeSettings) -> dict[int, tuple[uuid.UUID, str]]:
    """The GPUs of this host's running sessions, with each session's Unix account (gpufleet.users.runas)."""
    rows = sess.execute(
        select(GPUAllocation.gpu_index, Training.id, Training.owner)
        .join(Training, Training.id == GPUAllocation.training_id)
        .join(Host, Host.id == GPUAllocation.host_id)
        .join(TrainingSession, TrainingSession.training_id == Training.id)  # a session: a row with its side
        .where(Host.name == host_settings.host_name, Training.status == "running",
               GPUAllocation.released_at.is_(None))).all()
    out: dict[int, tuple[uuid.UUID, str]] = {}
    for index, tid, owner in rows:
        try:
            out[index] = (tid, for_owner(sess, code_settings.run_account, owner).name)
        except RunAsError:
            continue
    return out
