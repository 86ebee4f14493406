"""The same, named by a path whose folder the server trusts: for callers that hold a file's path."""

from __future__ import annotations

import stat
from pathlib import Path

from gpufleet.memberfs.folder import Dir
from gpufleet.memberfs.resolve import READ_LIMIT, beneath, split_name

def in_folder(path: str | Path, root: str | Path | None = None) -> tuple[Dir, str]:
    """``path``'s folder, by descriptor, and the last name in it. ``root``: the server's folder ``path`` is
    below, every name under it reached through no link; without it the folder is opened as named, which is
    right for a folder whose own name sits in a folder no member writes (the data dir's ``jobs/<id>``, a
    pool's ``<root>/<id>``), so that only the last name is one a member's process may have put something at."""
    p = Path(path)
    if root is None:
        return Dir.root(p.parent), p.name
    rel = beneath(root, p)
    folder, name = split_name(rel)
    return Dir.under(root, folder), name


def write_new(path: str | Path, text: str | bytes, mode: int = 0o600, root: str | Path | None = None) -> Path:
    """:meth:`Dir.write_new` of ``path``'s last name in its folder (see :func:`in_folder`)."""
    folder, name = in_folder(path, root)
    with folder:
        folder.write_new(name, text, mode)
    return Path(path)


def mark(path: str | Path, root: str | Path | None = None) -> None:
    """Create the marker file ``path`` if missing; never through a link, never blocking; never raises."""
    try:
        folder, name = in_folder(path, root)
    except (OSError, ValueError):
        return
    with folder:
        folder.mark(name)


def read_regular(path: str | Path, offset: int = 0, limit: int = READ_LIMIT,
                 root: str | Path | None = None) -> bytes | None:
    """Up to ``limit`` bytes of the regular file ``path`` from ``offset``; None when it is missing or not a
    regular file (a link, a FIFO, a device)."""
    try:
        folder, name = in_folder(path, root)
    except (OSError, ValueError):
        return None
    with folder:
        return folder.read(name, offset, limit)


def remove(path: str | Path, root: str | Path | None = None) -> None:
    """:meth:`Dir.remove` of ``path`` (nothing when its folder is missing, or not reached without a link)."""
    try:
        folder, name = in_folder(path, root)
    except (OSError, ValueError):
        return
    with folder:
        folder.remove(name)


def folder(path: str | Path, root: str | Path | None = None) -> Dir:
    """The folder ``path`` itself, by descriptor (see :func:`in_folder` for what ``root`` means)."""
    if root is None:
        return Dir.root(path)
    return Dir.under(root, beneath(root, path))


def hand_over(d: Path, uid: int, gid: int, mode: int = 0o700) -> None:
    """:meth:`Dir.hand_over` of the folder ``d``, whose own name sits in a folder of the server's (made
    here when missing, the server's own)."""
    d.parent.mkdir(parents=True, exist_ok=True)
    parent, name = in_folder(d)
    with parent:
        parent.hand_over(name, uid, gid, mode)


def give_once(d: Path, uid: int, gid: int, mode: int = 0o700) -> None:
    """The folder ``d`` (its own name in a folder of the server's) made ``uid``'s with ``mode``; what it
    holds given over too unless it was the account's already (then the account made all it holds)."""
    d.parent.mkdir(parents=True, exist_ok=True)
    parent, name = in_folder(d)
    with parent:
        st = parent.entry(name)
        if st is None or not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
            parent.hand_over(name, uid, gid, mode)
        else:
            parent.make_dir(name, uid, gid, mode)
