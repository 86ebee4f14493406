"""Files the worker touches inside folders a training's own Unix account owns.

A member's training runs as its owner's account, and its run, work and
checkpoint folders are that account's (``gpufleet.jobs.isolation``). The
worker, running as root, still writes there (the next attempt's spec, the stop
marker), reads there (progress and report files) and hands the folders over
again at each attempt. The training's code may have left anything in them: a
symbolic link to ``/etc/passwd`` named like the next spec file, a FIFO named
like the progress file, a link where the home folder should be. Every such
operation goes through this module, so none follows a link the training
planted, blocks on a FIFO or reads more than it can hold.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

# What one read of a progress or report file takes at most; the rest waits for the next read.
READ_LIMIT = 16 << 20


def write_new(path: str | Path, text: str) -> Path:
    """Replace whatever is at ``path`` with a new regular file (0600) holding ``text``, atomically.

    A temporary name beside it is removed first and created exclusively, so
    neither it nor ``path`` is ever opened through a link; ``os.replace``
    swaps the name itself, never a link's target.
    """
    p = Path(path)
    tmp = p.with_name(f".{p.name}.new")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, p)
    return p


def touch(path: str | Path) -> None:
    """Create ``path`` if it is missing (a marker file); never through a link, never blocking; never raises."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600))
    except OSError:
        pass


def read_regular(path: str | Path, offset: int = 0, limit: int = READ_LIMIT) -> bytes | None:
    """Up to ``limit`` bytes of the regular file ``path`` from ``offset``; None when it is missing or not a
    regular file (a link, a FIFO, a device)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        fh.seek(offset)
        return fh.read(limit)


def hand_over(d: Path, uid: int, gid: int, mode: int = 0o700) -> None:
    """Make ``d`` a real folder owned by ``uid``:``gid`` with ``mode``, and give it everything in it.

    A link (or a file) where the folder should be is removed and the folder
    made anew; links inside are given over themselves, never followed.
    """
    if os.path.islink(d) or (os.path.lexists(d) and not d.is_dir()):
        d.unlink()
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)  # a link put back since: refused (ELOOP)
    try:
        os.fchown(fd, uid, gid)
        os.fchmod(fd, mode)
        for _root, dirs, files, root_fd in os.fwalk(".", dir_fd=fd, follow_symlinks=False):
            for name in dirs + files:
                os.chown(name, uid, gid, dir_fd=root_fd, follow_symlinks=False)
    finally:
        os.close(fd)
