"""A sandbox made ahead finds the training it is given at the training's own paths (shared subtrees).

A member's warm launcher runs in a bwrap sandbox made before any training of
theirs is known. For each folder trainings' directories are made in (the
runs, the scripts' work dirs, the checkpoint root) the sandbox binds a slot,
an empty folder of its own under this worker's slot base, at that folder's
path. The base is a shared mount, and bwrap makes the mounts of its sandbox
slaves of the host's, so when the worker, once it knows the training, binds
each of its directories into the slot under the directory's name, the
directory appears in the sandbox at its own path: the same names inside and
out (``os.getcwd()`` in a script's work dir, the paths it prints or saves),
and nothing else of the data dir. A slot serves one training; it is emptied
when that training's launcher has exited, never before (an unmount would
reach into the sandbox too).

Nothing here deletes a file: a slot's folders are removed with ``rmdir``
only, after their mounts are gone, so a mount still in place leaves its
folder standing rather than emptied.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import subprocess
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger(__name__)

_MS_BIND = 0x1000
_MS_SHARED = 1 << 20
_MNT_DETACH = 2
_libc = ctypes.CDLL(None, use_errno=True)


def _mount(source: str | None, target: str, flags: int) -> None:
    src = source.encode() if source is not None else None
    if _libc.mount(src, target.encode(), None, ctypes.c_ulong(flags), None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source or ''} {target}: {os.strerror(err)}")


def _unmount(target: str) -> None:
    if _libc.umount2(target.encode(), _MNT_DETACH) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"umount {target}: {os.strerror(err)}")


_OCTAL = re.compile(rb"\\([0-7]{3})")


def _unescape(field: bytes) -> Path:
    """A mount point as mountinfo writes it: the path's own bytes, with blank, tab, newline and backslash as
    three-digit octal escapes (the kernel's ``mangle``), decoded as the filesystem encodes names."""
    return Path(os.fsdecode(_OCTAL.sub(lambda m: bytes([int(m.group(1), 8)]), field)))


def _mount_points() -> list[Path]:
    with open("/proc/self/mountinfo", "rb") as fh:
        return [_unescape(line.split()[4]) for line in fh]


class SlotBase:
    """This worker's slot folders: ``base`` (a shared mount), one folder per warm launcher under it."""

    def __init__(self, base: Path, roots: Sequence[Path]) -> None:
        self.base = base
        self.roots = [Path(r) for r in roots]

    @classmethod
    def make(cls, base: Path, roots: Sequence[Path]) -> SlotBase | None:
        """The base made a shared mount, what a worker before this one left in it cleared; None where this
        host cannot (not root, no mount rights): its sandboxed members then start cold."""
        try:
            base.mkdir(parents=True, exist_ok=True)
            base.chmod(0o711)
            clear_stale(base)
            if base not in _mount_points():
                _mount(str(base), str(base), _MS_BIND)
            _mount(None, str(base), _MS_SHARED)
        except OSError as exc:
            log.warning("warm launchers in members' sandboxes are off: %s", exc)
            return None
        return cls(base, roots)

    def close(self) -> None:
        """Unmount the base (its worker is stopping: the launchers it gave slots to end with it)."""
        clear_stale(self.base)
        if self.base in _mount_points():
            try:
                _unmount(str(self.base))
            except OSError as exc:
                log.warning("%s", exc)

    def new(self) -> Slots:
        folder = self.base / uuid.uuid4().hex
        _searchable(folder)
        slots = []
        for i, root in enumerate(self.roots):
            slot = folder / str(i)
            _searchable(slot)
            slots.append((slot, root))
        return Slots(folder, slots)


class Slots:
    """One warm launcher's slots: ``binds`` are (slot, the folder it stands for in the sandbox)."""

    def __init__(self, folder: Path, binds: list[tuple[Path, Path]]) -> None:
        self.folder = folder
        self.binds = binds
        self.mounted: list[Path] = []

    def holds(self, dirs: Sequence[Path]) -> bool:
        """Whether every one of ``dirs`` is made in a folder this launcher's sandbox has a slot for."""
        roots = {root for _, root in self.binds}
        return all(Path(d).parent in roots for d in dirs)

    def fill(self, dirs: Sequence[Path]) -> None:
        """Bind each of ``dirs`` into its slot: in the sandbox it is now at its own path."""
        slot_of = {root: slot for slot, root in self.binds}
        for d in dirs:
            d = Path(d)
            target = slot_of[d.parent] / d.name
            _searchable(target)
            _mount(str(d), str(target), _MS_BIND)
            self.mounted.append(target)

    def clear(self) -> None:
        """Unbind and remove the slots (after the launcher using them has exited)."""
        for target in reversed(self.mounted):
            try:
                _unmount(str(target))
            except OSError as exc:
                log.warning("%s", exc)
        self.mounted = []
        _remove_empty(self.folder)

    def clear_after(self, proc: subprocess.Popen) -> None:
        """Clear once ``proc`` (the launcher given these slots) has exited."""
        def wait() -> None:
            proc.wait()
            self.clear()

        threading.Thread(target=wait, name=f"gpufleet-slots-{self.folder.name}", daemon=True).start()


def _searchable(d: Path) -> None:
    """A folder of root's that the sandbox's account may pass through but not list (0711, whatever the umask:
    a worker's is 077, under which a slot would shut its account out of its own training)."""
    d.mkdir(exist_ok=True)
    d.chmod(0o711)


def _remove_empty(folder: Path) -> None:
    """rmdir a launcher's slot folder (``folder/<slot>/<name>``), deepest first; a mount point, or a folder
    still holding something, stays (nothing inside a mount is walked, let alone removed)."""
    mounts = set(_mount_points())  # (os.path.ismount misses a bind of a folder of the same file system)
    if not folder.is_dir() or folder in mounts:
        return
    for slot in folder.iterdir():
        if slot.is_dir() and slot not in mounts:
            for entry in slot.iterdir():
                if entry not in mounts:
                    _rmdir(entry)
        _rmdir(slot)
    _rmdir(folder)


def _rmdir(p: Path) -> None:
    try:
        os.rmdir(p)
    except OSError:
        pass


def clear_stale(base: Path) -> None:
    """Unmount what is bound under ``base`` (a worker that ended without clearing its slots), deepest first."""
    under = [p for p in _mount_points() if base in p.parents]
    for p in sorted(under, key=lambda p: len(p.parts), reverse=True):
        try:
            _unmount(str(p))
        except OSError as exc:
            log.warning("%s", exc)
    for child in base.iterdir() if base.is_dir() else []:
        _remove_empty(child)
