"""Every file the server touches inside a folder a member can write, touched here and nowhere else.

A member's pool folder, work dirs, checkpoints, outputs, the logs and progress
files of her attempts and her session folders are hers: she can put a link, a
FIFO or a folder anywhere in them, and swap one for another while the server
works. The server runs as root, so a path it resolves there is a path she
chose: a link named like her job's output file made root read ``/etc/shadow``
into her log, and a folder swapped for a link between a check and a ``chmod``
made root change the mode of any file.

So nothing here resolves such a path. A folder the server trusts (the data
dir's roots, a pool's checkpoint root: made by root, writable by root alone)
is opened once by descriptor (:meth:`Dir.root`); everything below it is reached
relative to that descriptor with no link followed at any component
(``openat2`` with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`` where the kernel
has it, else ``O_NOFOLLOW`` on each component in turn); modes and owners are
set on the opened descriptor (``fchmod``, ``fchown``), and files are read only
when they are regular files, opened without blocking (a FIFO cannot hang the
server). ``tests/test_memberfs_rule.py`` keeps every other server module off
path-based file calls in these trees.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

# What one read of a member's file takes at most; the rest waits for the next read.
READ_LIMIT = 16 << 20

RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
_RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
# openat2(2) is 437 in the generic syscall table and in x86_64's (Linux 5.6 and later).
_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437, "arm64": 437, "riscv64": 437}.get(platform.machine())
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


class NotRegular(OSError):
    """A name in a member's folder that is not what the server expected there (a FIFO, a device, a folder)."""


_state: dict[str, object] = {"openat2": _SYS_OPENAT2 is not None}
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def has_openat2() -> bool:
    """Whether this kernel resolves with ``openat2`` (else each component is opened with ``O_NOFOLLOW``)."""
    return bool(_state["openat2"])


def _parts(rel: str | PurePosixPath) -> list[str]:
    """``rel`` as names, refusing what could leave the folder (absolute paths, ``..``)."""
    p = PurePosixPath(rel)
    if p.is_absolute() or ".." in p.parts:
        raise ValueError(f"{rel} is not a path inside the folder")
    return [part for part in p.parts if part != "."]


def _openat2(dirfd: int, rel: str, flags: int, mode: int) -> int | None:
    """The descriptor, or None when this kernel has no ``openat2`` (then never asked again)."""
    tmpfile = getattr(os, "O_TMPFILE", 0)
    creates = flags & os.O_CREAT or (tmpfile and flags & tmpfile == tmpfile)
    how = _OpenHow(flags, mode if creates else 0, _RESOLVE)
    for _ in range(64):  # EAGAIN: a rename elsewhere raced the lookup; the kernel asks to try again
        fd = _libc.syscall(ctypes.c_long(_SYS_OPENAT2), ctypes.c_int(dirfd), ctypes.c_char_p(os.fsencode(rel)),
                           ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
        if fd >= 0:
            return int(fd)
        err = ctypes.get_errno()
        if err == errno.ENOSYS:
            _state["openat2"] = False
            return None
        if err != errno.EAGAIN:
            raise OSError(err, os.strerror(err), rel)
    raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN), rel)


def open_beneath(dirfd: int, rel: str | PurePosixPath, flags: int = os.O_RDONLY, mode: int = 0o600) -> int:
    """``rel`` under the folder ``dirfd``, opened through no link at any component (ELOOP if one is there)."""
    names = _parts(rel)
    flags |= os.O_NOFOLLOW | os.O_CLOEXEC
    if not names:
        return os.open(".", flags, dir_fd=dirfd)
    if has_openat2():
        fd = _openat2(dirfd, "/".join(names), flags, mode)
        if fd is not None:
            return fd
    cur = dirfd
    try:
        for name in names[:-1]:
            nxt = _open_one(name, _DIR_FLAGS, 0, cur)
            if cur != dirfd:
                os.close(cur)
            cur = nxt
        return _open_one(names[-1], flags, mode, cur)
    finally:
        if cur != dirfd:
            os.close(cur)


def _open_one(name: str, flags: int, mode: int, dirfd: int) -> int:
    """One component, never through a link; a link says ELOOP, as ``openat2`` does (``O_DIRECTORY`` makes
    the kernel say ENOTDIR for one)."""
    try:
        return os.open(name, flags, mode, dir_fd=dirfd)
    except NotADirectoryError:
        if stat.S_ISLNK(os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_mode):
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), name) from None
        raise


def _split(rel: str | PurePosixPath) -> tuple[str, str]:
    names = _parts(rel)
    if not names:
        raise ValueError("a name inside the folder is needed, not the folder itself")
    return "/".join(names[:-1]) or ".", names[-1]


def beneath(root: str | Path, path: str | Path) -> str:
    """``path`` relative to ``root``, compared as written (no link looked at); ValueError when outside."""
    rel = PurePosixPath(os.path.normpath(path)).relative_to(os.path.normpath(root))
    _parts(rel)
    return str(rel)


class Dir:
    """A folder held by descriptor; what is below it is reached relative to it, never through a link."""

    def __init__(self, fd: int, path: Path):
        self.fd = fd
        self.path = path  # for messages, and for a root-only folder's own paths; never resolved here

    @classmethod
    def root(cls, path: str | Path) -> Dir:
        """A folder the server trusts (made by root, or by the operator's configuration), opened as named."""
        return cls(os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), Path(path))

    @classmethod
    def under(cls, root: str | Path, rel: str | PurePosixPath) -> Dir:
        """The folder ``rel`` below the trusted ``root``, reached through no link."""
        with cls.root(root) as top:
            return top.sub(rel)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Dir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def sub(self, rel: str | PurePosixPath) -> Dir:
        return Dir(open_beneath(self.fd, rel, os.O_RDONLY | os.O_DIRECTORY), self.path / rel)

    def _parent(self, rel: str | PurePosixPath) -> tuple[Dir, str]:
        folder, name = _split(rel)
        return self.sub(folder), name

    def lstat(self, rel: str | PurePosixPath) -> os.stat_result | None:
        """What is at ``rel`` itself (a link is a link), or None when nothing (or no way through) is there."""
        try:
            parent, name = self._parent(rel)
        except (OSError, ValueError):
            return None
        with parent:
            try:
                return os.stat(name, dir_fd=parent.fd, follow_symlinks=False)
            except OSError:
                return None

    def open_regular(self, rel: str | PurePosixPath, flags: int = os.O_RDONLY, mode: int = 0o600) -> int:
        """A regular file's descriptor (never blocking on a FIFO); NotRegular for anything else."""
        fd = open_beneath(self.fd, rel, flags | os.O_NONBLOCK, mode)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise NotRegular(errno.EINVAL, "not a regular file", str(rel))
        os.set_blocking(fd, True)
        return fd

    def read(self, rel: str | PurePosixPath, offset: int = 0, limit: int = READ_LIMIT) -> bytes | None:
        """Up to ``limit`` bytes of the regular file ``rel`` from ``offset``; None when it is missing, behind
        a link, or not a regular file."""
        try:
            fd = self.open_regular(rel)
        except OSError:
            return None
        with os.fdopen(fd, "rb") as fh:
            fh.seek(offset)
            return fh.read(limit)

    def text(self, rel: str | PurePosixPath, limit: int = READ_LIMIT) -> str | None:
        data = self.read(rel, 0, limit)
        return None if data is None else data.decode("utf-8", "replace")

    def append(self, rel: str | PurePosixPath, data: bytes, mode: int = 0o600) -> None:
        fd = self.open_regular(rel, os.O_WRONLY | os.O_CREAT | os.O_APPEND, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)

    def write_new(self, rel: str | PurePosixPath, data: bytes | str, mode: int = 0o600) -> None:
        """Replace whatever is at ``rel`` with a new regular file holding ``data``, atomically: written under
        a temporary name made exclusively, then renamed over the name itself (never a link's target)."""
        parent, name = self._parent(rel)
        with parent:
            tmp = f".{name}.new"
            try:
                os.unlink(tmp, dir_fd=parent.fd)
            except FileNotFoundError:
                pass
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                         dir_fd=parent.fd)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data.encode() if isinstance(data, str) else data)
                os.fchmod(fh.fileno(), mode)
            os.replace(tmp, name, src_dir_fd=parent.fd, dst_dir_fd=parent.fd)

    def mark(self, rel: str | PurePosixPath) -> bool:
        """Create ``rel`` if missing (a marker file); never through a link, never blocking; never raises."""
        try:
            os.close(open_beneath(self.fd, rel, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK, 0o600))
            return True
        except (OSError, ValueError):
            return False

    def exists(self, rel: str | PurePosixPath) -> bool:
        return self.lstat(rel) is not None

    def names(self, rel: str | PurePosixPath = ".") -> list[str]:
        with self.sub(rel) as d:
            return os.listdir(d.fd)

    def files(self, rel: str | PurePosixPath = ".") -> Iterator[tuple[PurePosixPath, os.stat_result]]:
        """Every regular file below ``rel`` (its path from ``rel``, its stat), folders in name order; links
        are neither followed nor yielded."""
        with self.sub(rel) as d:
            for folder, dirs, names, dir_fd in os.fwalk(".", dir_fd=d.fd, follow_symlinks=False):
                dirs.sort()
                for name in sorted(names):
                    try:
                        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                    except OSError:
                        continue  # gone since the walk saw it
                    if stat.S_ISREG(st.st_mode):
                        yield PurePosixPath(folder, name), st

    def give(self, rel: str | PurePosixPath, uid: int | None, gid: int | None, mode: int) -> None:
        """The regular file ``rel``, given mode ``mode`` (and to ``uid``:``gid`` when root), on its descriptor."""
        fd = self.open_regular(rel)
        try:
            _set(fd, uid, gid, mode)
        finally:
            os.close(fd)

    def make_dir(self, rel: str | PurePosixPath, uid: int | None = None, gid: int | None = None,
                 mode: int = 0o700) -> None:
        """The folder ``rel`` (made when missing, its parents too), given ``mode`` and, when root, ``uid``:
        ``gid``, on its own descriptor: a link or a file in its place is refused (OSError), never followed."""
        names = _parts(rel)
        cur = Dir(os.dup(self.fd), self.path)
        try:
            for name in names:
                try:
                    os.mkdir(name, 0o700, dir_fd=cur.fd)
                except FileExistsError:
                    pass
                nxt = Dir(_open_one(name, _DIR_FLAGS, 0, cur.fd), cur.path / name)  # ELOOP: a link
                cur.close()
                cur = nxt
            if not stat.S_ISDIR(os.fstat(cur.fd).st_mode):
                raise NotADirectoryError(errno.ENOTDIR, "not a folder", str(rel))
            _set(cur.fd, uid, gid, mode)
        finally:
            cur.close()

    def remove(self, rel: str | PurePosixPath) -> None:
        """Remove what is at ``rel``: a file or a link itself, or a folder and all in it (by descriptor)."""
        parent, name = self._parent(rel)
        with parent:
            try:
                st = os.stat(name, dir_fd=parent.fd, follow_symlinks=False)
            except FileNotFoundError:
                return
            if stat.S_ISDIR(st.st_mode):
                shutil.rmtree(name, dir_fd=parent.fd)  # fd-based on Linux: never follows a link inside
            else:
                os.unlink(name, dir_fd=parent.fd)

    def move(self, src: str | PurePosixPath, dst: str | PurePosixPath, into: Dir | None = None) -> None:
        """Move ``src`` to ``dst`` (below ``into``, else this folder): the names themselves, never a target."""
        sparent, sname = self._parent(src)
        dparent, dname = (into or self)._parent(dst)
        with sparent, dparent:
            os.rename(sname, dname, src_dir_fd=sparent.fd, dst_dir_fd=dparent.fd)

    def hand_over(self, rel: str | PurePosixPath, uid: int, gid: int, mode: int = 0o700) -> None:
        """Make ``rel`` a real folder of ``uid``:``gid`` with ``mode``, and give it all it holds: a link or a
        file in its place is removed and the folder made anew; links inside are given over themselves."""
        st = self.lstat(rel)
        if st is not None and not stat.S_ISDIR(st.st_mode):
            self.remove(rel)
        self.make_dir(rel, uid, gid, mode)
        self.give_tree(rel, uid, gid)

    def give_tree(self, rel: str | PurePosixPath, uid: int, gid: int) -> None:
        """Everything in the folder ``rel`` (and it), given to ``uid``:``gid`` when root; links themselves."""
        if os.geteuid() != 0:
            return
        with self.sub(rel) as d:
            os.fchown(d.fd, uid, gid)
            for _root, dirs, files, root_fd in os.fwalk(".", dir_fd=d.fd, follow_symlinks=False):
                for name in dirs + files:
                    os.chown(name, uid, gid, dir_fd=root_fd, follow_symlinks=False)


def _set(fd: int, uid: int | None, gid: int | None, mode: int) -> None:
    if uid is not None and os.geteuid() == 0:
        os.fchown(fd, uid, -1 if gid is None else gid)
    os.fchmod(fd, mode)


def in_folder(path: str | Path) -> tuple[Dir, str]:
    """``path``'s folder, opened as named, and the last name in it: for a file whose folder's own name sits
    in a folder no member writes (the data dir's ``jobs/<id>``, a pool's ``<root>/<id>``), so that only the
    last name is one a member's process may have put something at."""
    p = Path(path)
    return Dir.root(p.parent), p.name


def write_new(path: str | Path, text: str | bytes, mode: int = 0o600) -> Path:
    """:meth:`Dir.write_new` of ``path``'s last name in its folder (see :func:`in_folder`)."""
    folder, name = in_folder(path)
    with folder:
        folder.write_new(name, text, mode)
    return Path(path)


def mark(path: str | Path) -> None:
    """Create the marker file ``path`` if missing; never through a link, never blocking; never raises."""
    try:
        folder, name = in_folder(path)
    except OSError:
        return
    with folder:
        folder.mark(name)


def read_regular(path: str | Path, offset: int = 0, limit: int = READ_LIMIT) -> bytes | None:
    """Up to ``limit`` bytes of the regular file ``path`` from ``offset``; None when it is missing or not a
    regular file (a link, a FIFO, a device)."""
    try:
        folder, name = in_folder(path)
    except OSError:
        return None
    with folder:
        return folder.read(name, offset, limit)


def hand_over(d: Path, uid: int, gid: int, mode: int = 0o700) -> None:
    """:meth:`Dir.hand_over` of the folder ``d``, whose own name sits in a folder of the server's (made
    here when missing, the server's own)."""
    d.parent.mkdir(parents=True, exist_ok=True)
    folder, name = in_folder(d)
    with folder:
        folder.hand_over(name, uid, gid, mode)
