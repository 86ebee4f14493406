"""The host's cache of training environments: one folder per key, one lock per key, LRU within a budget.

``<cache>/<key>/`` is a virtual environment; it counts once ``<key>/.gpufleet-ready``
exists (written last, with the folder's size). ``<cache>/<key>.lock`` is an
``flock`` lock file: a training that uses an environment holds it shared for
as long as it runs, a build holds it exclusively, so one build per key runs at
a time (a second training of the same key waits and then reuses it) and an
environment in use is never evicted. Eviction removes the least recently used
ready environments (the marker's mtime, touched on every use) until the cache
fits its budget; a half-built folder left by a killed build is removed by the
next build of its key.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

READY = ".gpufleet-ready"
POLL_S = 0.2


def env_key(files: list[tuple[str, bytes]], identity: dict[str, Any]) -> str:
    """The cache key: the requirement files' names and bytes, and the interpreter and platform they build on."""
    h = hashlib.sha256(json.dumps(identity, sort_keys=True).encode())
    for name, data in sorted(files):
        h.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()[:24]


def dir_size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_blocks * 512
            except OSError:
                continue
    return total


class Stopped(Exception):
    """The training was asked to stop while it waited for a lock."""


class Slot:
    """One key of the cache, locked shared (in use) or exclusively (being built)."""

    def __init__(self, root: Path, key: str):
        root.mkdir(parents=True, exist_ok=True)
        self.key = key
        self.dir = root / key
        self._fd = os.open(root / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o644)

    def _wait(self, mode: int, tick: Callable[[], bool]) -> None:
        while not self._try(mode):
            if not tick():
                raise Stopped
            time.sleep(POLL_S)

    def _try(self, mode: int) -> bool:
        try:
            fcntl.flock(self._fd, mode | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False

    def try_exclusive(self) -> bool:
        return self._try(fcntl.LOCK_EX)

    def try_shared(self) -> bool:
        return self._try(fcntl.LOCK_SH)

    def exclusive(self, tick: Callable[[], bool]) -> None:
        self._wait(fcntl.LOCK_EX, tick)

    def shared(self, tick: Callable[[], bool]) -> None:
        self._wait(fcntl.LOCK_SH, tick)

    def ready(self) -> bool:
        return (self.dir / READY).is_file()

    def touch(self) -> None:
        os.utime(self.dir / READY)

    def mark_ready(self, info: dict[str, Any]) -> None:
        marker = self.dir / READY
        tmp = marker.with_suffix(".tmp")
        tmp.write_text(json.dumps({**info, "size": dir_size(self.dir)}))
        os.replace(tmp, marker)

    def clear(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def release(self) -> None:
        os.close(self._fd)


def _entries(root: Path) -> list[tuple[float, int, str]]:
    """(last use, size, key) of every ready environment in the cache."""
    out = []
    for marker in root.glob(f"*/{READY}"):
        try:
            size = int(json.loads(marker.read_text()).get("size", 0))
            out.append((marker.stat().st_mtime, size, marker.parent.name))
        except (OSError, ValueError):
            continue
    return sorted(out)


def evict(root: Path, budget: int, keep: str) -> list[str]:
    """Remove least recently used environments no training holds until the cache fits ``budget`` bytes."""
    entries = _entries(root)
    total = sum(size for _, size, _ in entries)
    removed = []
    for _used, size, key in entries:
        if total <= budget:
            break
        if key == keep:
            continue
        slot = Slot(root, key)
        try:
            if slot.try_exclusive():  # nobody runs with it or builds it
                slot.clear()
                total -= size
                removed.append(key)
        finally:
            slot.release()
    return removed
