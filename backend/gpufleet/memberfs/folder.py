"""A folder of a member's held by descriptor, and everything the server does below it."""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from gpufleet.memberfs.resolve import DIR_FLAGS, READ_LIMIT, NotRegular, names_of, open_beneath, open_one, split_name

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
        """The folder ``rel``; a link there (or on the way) is ELOOP, never followed."""
        try:
            return Dir(open_beneath(self.fd, rel, os.O_RDONLY | os.O_DIRECTORY), self.path / rel)
        except NotADirectoryError:
            st = self.entry(rel)
            if st is not None and stat.S_ISLNK(st.st_mode):  # O_DIRECTORY: the kernel says ENOTDIR for it
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(rel)) from None
            raise

    def _parent(self, rel: str | PurePosixPath) -> tuple[Dir, str]:
        folder, name = split_name(rel)
        return self.sub(folder), name

    def entry(self, rel: str | PurePosixPath) -> os.stat_result | None:
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

    def has(self, rel: str | PurePosixPath) -> bool:
        return self.entry(rel) is not None

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
                 mode: int | None = 0o700) -> None:
        """The folder ``rel`` (made when missing, its parents too), given ``mode`` and, when root, ``uid``:
        ``gid``, on its own descriptor: a link or a file in its place is refused (OSError), never followed."""
        names = names_of(rel)
        cur = Dir(os.dup(self.fd), self.path)
        try:
            for name in names:
                try:
                    os.mkdir(name, 0o700, dir_fd=cur.fd)
                except FileExistsError:
                    pass
                nxt = Dir(open_one(name, DIR_FLAGS, 0, cur.fd), cur.path / name)  # ELOOP: a link
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

    def copy_to(self, rel: str | PurePosixPath, dst: Dir, dst_rel: str | PurePosixPath) -> None:
        """Copy ``rel`` (a regular file, or a folder and what it holds) to ``dst_rel`` below ``dst``, made
        anew there; links are copied as links, never followed; FIFOs and devices are left out."""
        st = self.entry(rel)
        if st is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(rel))
        sparent, sname = self._parent(rel)
        dparent, dname = dst._parent(dst_rel)
        with sparent, dparent:
            if stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(sname, dir_fd=sparent.fd), dname, dir_fd=dparent.fd)
            elif stat.S_ISDIR(st.st_mode):
                os.mkdir(dname, 0o700, dir_fd=dparent.fd)
                for name in self.names(rel):
                    self.copy_to(f"{rel}/{name}", dst, f"{dst_rel}/{name}")
            elif stat.S_ISREG(st.st_mode):
                with os.fdopen(self.open_regular(rel), "rb") as src, \
                        os.fdopen(os.open(dname, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                                          0o600, dir_fd=dparent.fd), "wb") as out:
                    shutil.copyfileobj(src, out)

    def hand_over(self, rel: str | PurePosixPath, uid: int, gid: int, mode: int = 0o700) -> None:
        """Make ``rel`` a real folder of ``uid``:``gid`` with ``mode``, and give it all it holds: a link or a
        file in its place is removed and the folder made anew; links inside are given over themselves."""
        st = self.entry(rel)
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


def _set(fd: int, uid: int | None, gid: int | None, mode: int | None) -> None:
    if uid is not None and os.geteuid() == 0:
        os.fchown(fd, uid, -1 if gid is None else gid)
    if mode is not None:
        os.fchmod(fd, mode)
