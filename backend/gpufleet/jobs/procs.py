"""Process groups of launchers: stopping them, and finding the ones a dead worker left.

Every launcher leads its own process group, and its ranks inherit it. The
worker writes ``<data_dir>/jobs/pids/<host>/<training_id>.json`` while a
launcher runs; a file that is still there when a worker starts on that host
belongs to a worker that died, and its group is killed before any new work is
taken (so a resumed training never races an orphaned copy of itself).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
import uuid
from pathlib import Path

from gpufleet.config import Settings

log = logging.getLogger(__name__)


def pid_dir(settings: Settings, host_name: str) -> Path:
    return settings.data_dir / "jobs" / "pids" / host_name


def write_pidfile(settings: Settings, host_name: str, tid: uuid.UUID, pgid: int, worker_id: str) -> None:
    d = pid_dir(settings, host_name)
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / f".{tid}.tmp"
    tmp.write_text(json.dumps({"pgid": pgid, "worker": worker_id, "training_id": str(tid)}))
    os.replace(tmp, d / f"{tid}.json")


def remove_pidfile(settings: Settings, host_name: str, tid: uuid.UUID) -> None:
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


def kill_orphans(settings: Settings, host_name: str) -> list[str]:
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
    return killed
