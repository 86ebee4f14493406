"""Unpacking a code archive where tarfile has no ``data`` filter (Python 3.11.0 to 3.11.3, Debian 12's 3.11.2).

:func:`extract_data` applies the checks of ``tarfile.data_filter`` to each
entry, on the disk as it is at that moment, then writes the entry itself:

- a name that is absolute after its leading ``/`` is stripped, or that
  resolves (``os.path.realpath``, through links already written) outside the
  destination, is refused;
- a link whose target is absolute, or resolves outside the destination, is
  refused;
- device files, FIFOs and anything but files, folders and links are refused;
- modes lose the setuid, setgid and sticky bits and group/other write; a
  file is readable and writable by its owner, executable only if its owner
  could execute it; owners recorded in the archive are ignored.

Nothing here relies on ``extractall``'s own filter argument, so it runs the
same on every Python the project supports.
"""

from __future__ import annotations

import os
import shutil
import tarfile
from pathlib import Path



class UnsafeEntry(ValueError):
    """An entry the data filter refuses; ``entry`` names it (``gpufleet.trainings.archive`` makes it a 422)."""

    def __init__(self, message: str, entry: str):
        super().__init__(message)
        self.entry = entry


def _inside(path: str, root: str) -> bool:
    return os.path.commonpath([os.path.realpath(path), root]) == root


def checked_name(m: tarfile.TarInfo, root: str) -> str:
    """The entry's path under ``root`` (``root`` already real), or :class:`UnsafeEntry` as the data filter says."""
    name = m.name.lstrip("/" + os.sep)
    if not name or os.path.isabs(name):
        raise UnsafeEntry(f"entry {m.name!r} has an absolute path", entry=m.name)
    target = os.path.join(root, name)
    if not _inside(target, root):
        raise UnsafeEntry(f"entry {m.name!r} would be written outside the destination", entry=m.name)
    if m.issym() or m.islnk():
        if os.path.isabs(m.linkname):
            raise UnsafeEntry(f"entry {m.name!r} links to the absolute path {m.linkname!r}", entry=m.name)
        pointed = os.path.join(root, os.path.dirname(name), m.linkname) if m.issym() else os.path.join(root, m.linkname)
        if not _inside(pointed, root):
            raise UnsafeEntry(f"entry {m.name!r} links to {m.linkname!r}, outside the destination", entry=m.name)
    elif not (m.isreg() or m.isdir()):
        raise UnsafeEntry(f"entry {m.name!r} is a device file, FIFO or other special file", entry=m.name)
    return target


def file_mode(mode: int) -> int:
    """The data filter's mode of a file: no high bits or group/other write, owner rw, x only if the owner's."""
    mode &= 0o755
    if not mode & 0o100:
        mode &= ~0o111
    return mode | 0o600


def _clear(target: str) -> None:
    """Remove what stands at ``target`` (never following a link), so the entry is written in its place."""
    if os.path.islink(target) or (os.path.lexists(target) and not os.path.isdir(target)):
        os.unlink(target)
    elif os.path.isdir(target):
        shutil.rmtree(target)


def _write_file(tar: tarfile.TarFile, m: tarfile.TarInfo, target: str) -> None:
    source = tar.extractfile(m)
    if source is None:
        raise UnsafeEntry(f"entry {m.name!r} has no data", entry=m.name)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as out, source:
        shutil.copyfileobj(source, out)
    os.chmod(target, file_mode(m.mode))
    os.utime(target, (m.mtime, m.mtime))


def extract_data(tar: tarfile.TarFile, dest: Path) -> None:
    """Extract every entry of ``tar`` into ``dest`` with the ``data`` filter's checks; :class:`UnsafeEntry`
    on the first entry it refuses (what came before it stays written, as with ``extractall``)."""
    root = os.path.realpath(dest)
    for m in tar.getmembers():
        target = checked_name(m, root)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if m.isdir():
            if os.path.islink(target) or (os.path.lexists(target) and not os.path.isdir(target)):
                _clear(target)
            os.makedirs(target, exist_ok=True)
            continue
        _clear(target)
        if m.issym():
            os.symlink(m.linkname, target)
        elif m.islnk():
            os.link(os.path.join(root, m.linkname), target, follow_symlinks=False)
        else:
            _write_file(tar, m, target)
