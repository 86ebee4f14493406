"""Resolving a name below a folder held by descriptor, through no link at any component: ``openat2`` with
``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`` where the kernel has it (Linux 5.6), else
one ``O_NOFOLLOW`` open per component."""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import stat
from pathlib import Path, PurePosixPath

READ_LIMIT = 16 << 20

RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
_RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
# openat2(2) is 437 in the generic syscall table and in x86_64's (Linux 5.6 and later).
_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437, "arm64": 437, "riscv64": 437}.get(platform.machine())
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


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


def names_of(rel: str | PurePosixPath) -> list[str]:
    """``rel`` as names, refusing what could leave the folder (absolute paths, ``..``)."""
    p = PurePosixPath(rel)
    if p.is_absolute() or ".." in p.parts:
        raise ValueError(f"{rel} is not a path inside the folder")
    return [part for part in p.parts if part != "."]


def _openat2(dirfd: int, rel: str, flags: int, mode: int) -> int | None:
    """The descriptor, or None when this kernel has no ``openat2`` (then never asked again)."""
    if _SYS_OPENAT2 is None:  # no syscall number known for this machine
        return None
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
    names = names_of(rel)
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
            nxt = open_one(name, DIR_FLAGS, 0, cur)
            if cur != dirfd:
                os.close(cur)
            cur = nxt
        return open_one(names[-1], flags, mode, cur)
    finally:
        if cur != dirfd:
            os.close(cur)


def open_one(name: str, flags: int, mode: int, dirfd: int) -> int:
    """One component, never through a link; a link says ELOOP, as ``openat2`` does (``O_DIRECTORY`` makes
    the kernel say ENOTDIR for one)."""
    try:
        return os.open(name, flags, mode, dir_fd=dirfd)
    except NotADirectoryError:
        if stat.S_ISLNK(os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_mode):
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), name) from None
        raise


def split_name(rel: str | PurePosixPath) -> tuple[str, str]:
    names = names_of(rel)
    if not names:
        raise ValueError("a name inside the folder is needed, not the folder itself")
    return "/".join(names[:-1]) or ".", names[-1]


def beneath(root: str | Path, path: str | Path) -> str:
    """``path`` relative to ``root``, compared as written (no link looked at); ValueError when outside."""
    rel = PurePosixPath(os.path.normpath(path)).relative_to(os.path.normpath(root))
    names_of(rel)
    return str(rel)
