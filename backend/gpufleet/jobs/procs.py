"""Process groups of launchers: stopping them, and finding the ones a dead worker left.

Every launcher leads its own process group, and its ranks inherit it. The
worker writes ``<data_dir>/jobs/pids/<host>/<training_id>.json`` while a
launcher runs; a file that is still there when a worker starts on that host
belongs to a worker that died, and its group is killed before any new work is
taken (so a resumed training never races an orphaned copy of itself).

A group killed with SIGKILL takes multiprocessing's resource tracker with it,
so the named semaphores of its ranks (``/dev/shm/sem.mp-*``) stay behind;
:func:`sweep_semaphores` removes those no live process has open.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
import uuid
from pathlib import Path

from gpufleet.config import StoreSettings

log = logging.getLogger(__name__)


def pid_dir(settings: StoreSettings, host_name: str) -> Path:
    return settings.data_dir / "jobs" / "pids" / host_name


_HOST_LOCKS: dict[str, int] = {}


class HostTaken(RuntimeError):
    """Another live worker of this host runs on this machine."""


def hold_host_lock(settings: StoreSettings, host_name: str) -> None:
    """Hold, until this process exits, the lock that says a worker of ``host_name`` runs here.

    Two workers of one host on one machine would each take the host's tasks,
    and each one's start-up cleanup would kill the other's launchers as
    orphans. The second one therefore refuses to start, naming the first.
    The lock is an ``flock``: the kernel drops it when its holder dies, so a
    killed worker never leaves it behind, and launchers do not inherit it.
    """
    import fcntl

    if host_name in _HOST_LOCKS:
        return
    d = pid_dir(settings, host_name)
    d.mkdir(parents=True, exist_ok=True)
    fd = os.open(d / ".worker.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise HostTaken(
            f"another worker of host {host_name!r} is running on this machine (pid {holder}); "
            "stop it first, or give this one another --host-name") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _HOST_LOCKS[host_name] = fd


def write_pidfile(settings: StoreSettings, host_name: str, tid: uuid.UUID, pgid: int, worker_id: str) -> None:
    d = pid_dir(settings, host_name)
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / f".{tid}.tmp"
    tmp.write_text(json.dumps({"pgid": pgid, "worker": worker_id, "training_id": str(tid)}))
    os.replace(tmp, d / f"{tid}.json")


def remove_pidfile(settings: StoreSettings, host_name: str, tid: uuid.UUID) -> None:
    (pid_dir(settings, host_name) / f"{tid}.json").unlink(missing_ok=True)


def group_members(pgid: int) -> list[int]:
    """Live pids in process group ``pgid`` (Linux /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Fields after the parenthesised command: state ppid pgrp ...
        rest = stat.rsplit(")", 1)[-1].split()
        if len(rest) > 2 and rest[0] != "Z" and int(rest[2]) == pgid:
            out.append(int(entry.name))
    return out


SHM = Path("/dev/shm")
# Younger than this, a semaphore may be in the middle of being handed to a child.
SEMAPHORE_MIN_AGE_S = 2.0


def _mapped_semaphores() -> set[int]:
    """Inodes of ``/dev/shm`` files some live process has mapped (those we can see).

    A POSIX semaphore is created under a temporary name, mapped, then linked to
    its real name (``sem.mp-…``) and the temporary name removed, so a process's
    maps show ``/dev/shm/sem.XXXXXX (deleted)`` for a semaphore that is very
    much alive. Names prove nothing; the inode is what both names share.
    """
    inodes: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            maps = (entry / "maps").read_text()
        except OSError:
            continue
        for line in maps.splitlines():
            if "/dev/shm/" not in line:
                continue
            fields = line.split()
            if len(fields) >= 5 and fields[4].isdigit():
                inodes.add(int(fields[4]))
    return inodes


def sweep_semaphores(min_age_s: float = SEMAPHORE_MIN_AGE_S) -> list[str]:
    """Remove this user's multiprocessing semaphores that no live process has open; returns their names."""
    if not SHM.is_dir():
        return []
    try:
        candidates = [p for p in SHM.glob("sem.mp-*") if p.stat().st_uid == os.geteuid()]
    except OSError:
        return []
    if not candidates:
        return []
    in_use = _mapped_semaphores()
    now = time.time()
    removed = []
    for p in candidates:
        try:
            st = p.stat()
            if st.st_ino in in_use or now - st.st_mtime < min_age_s:
                continue
            p.unlink()
            removed.append(p.name)
        except OSError:
            continue
    return removed


def signal_group(pgid: int, sig: int) -> None:
    """Send ``sig`` to process group ``pgid``; a group already gone is fine."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def stop_group(pgid: int, grace_s: float) -> None:
    """SIGTERM the group, wait up to ``grace_s``, then SIGKILL whatever is left."""
    if grace_s > 0:
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            if not group_members(pgid):
                return
            time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return
    # Its resource tracker died with it: what it would have unlinked is ours to remove.
    deadline = time.monotonic() + 5
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.02)
    sweep_semaphores(min_age_s=0.0)


def kill_orphans(settings: StoreSettings, host_name: str) -> list[str]:
    """Kill the launcher groups a previous worker of this host left; returns their training ids."""
    d = pid_dir(settings, host_name)
    if not d.is_dir():
        return []
    killed = []
    for f in d.glob("*.json"):
        try:
            info = json.loads(f.read_text())
            pgid = int(info["pgid"])
        except (OSError, ValueError, KeyError):
            f.unlink(missing_ok=True)
            continue
        if group_members(pgid):
            log.warning("killing launcher group %d of training %s left by a dead worker",
                        pgid, info.get("training_id"))
            stop_group(pgid, 0.0)
            killed.append(str(info.get("training_id")))
        f.unlink(missing_ok=True)
    # Groups that died on their own (killed with their worker) left their semaphores too.
    swept = sweep_semaphores()
    if swept:
        log.info("removed %d semaphore(s) left by killed launchers", len(swept))
    return killed
