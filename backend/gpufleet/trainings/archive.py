"""Code archives: the checks an upload must pass, unpacking, and packing a directory.

An archive is a gzip-compressed tar. Every entry is checked before anything is
written: a path that is absolute or climbs out with ``..``, a link (symbolic
or hard) whose target leaves the archive's root, a device file or FIFO, and
too many files or bytes each refuse the whole archive with an
:class:`ArchiveError` naming the entry. Paths and link targets are resolved
as the unpack will resolve them on disk, through the links the entries
before made (:class:`_Tree`): a chain of links, each harmless alone, that
climbs out (``a -> .``, then ``a/b -> ..``) is refused at upload, not when a
training unpacks it.

Packing is deterministic (sorted names, zero times and owners), so the same
tree gives the same bytes, and the same hash, on every machine.
"""

from __future__ import annotations

import fnmatch
import gzip
import hashlib
import io
import os
import posixpath
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MAX_BYTES = 100 * 1024 * 1024
DEFAULT_MAX_UNPACKED_BYTES = 1024 * 1024 * 1024
DEFAULT_MAX_FILES = 20000


class ArchiveError(ValueError):
    """The archive is refused; ``entry`` names the member at fault (or None), ``status`` the HTTP code."""

    def __init__(self, message: str, entry: str | None = None, status: int = 422):
        super().__init__(message)
        self.entry = entry
        self.status = status


@dataclass(frozen=True)
class Limits:
    max_bytes: int = DEFAULT_MAX_BYTES
    max_unpacked_bytes: int = DEFAULT_MAX_UNPACKED_BYTES
    max_files: int = DEFAULT_MAX_FILES


@dataclass(frozen=True)
class ArchiveInfo:
    hash: str
    size: int
    unpacked_size: int
    files: int


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _inside(path: str) -> bool:
    """Whether a normalised relative POSIX path stays inside the root."""
    norm = posixpath.normpath(path)
    return not (norm == ".." or norm.startswith("../") or posixpath.isabs(norm))


def _check_member(m: tarfile.TarInfo) -> None:
    name = m.name
    if not name or "\x00" in name:
        raise ArchiveError("an entry has an empty or invalid name", entry=name or "")
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise ArchiveError(f"entry {name!r} has an absolute path; archive paths must be relative", entry=name)
    if ".." in name.split("/"):
        raise ArchiveError(f"entry {name!r} contains '..'; archive paths must stay inside the work dir", entry=name)
    if m.issym():
        target = m.linkname
        if posixpath.isabs(target) or not _inside(posixpath.join(posixpath.dirname(name), target)):
            raise ArchiveError(
                f"entry {name!r} is a symbolic link to {target!r}, which leaves the work dir", entry=name
            )
    elif m.islnk():
        if posixpath.isabs(m.linkname) or not _inside(m.linkname):
            raise ArchiveError(f"entry {name!r} is a hard link to {m.linkname!r}, which leaves the work dir",
                               entry=name)
    elif m.ischr() or m.isblk() or m.isfifo():
        raise ArchiveError(f"entry {name!r} is a device file or FIFO; only files, folders and links are allowed",
                           entry=name)
    elif not (m.isfile() or m.isdir()):
        raise ArchiveError(f"entry {name!r} is not a regular file, folder or link", entry=name)


MAX_LINK_HOPS = 40  # as the kernel's ELOOP


class _Tree:
    """The links an unpack has made so far, to resolve a path as ``os.path.realpath`` will on disk."""

    def __init__(self) -> None:
        self.links: dict[str, str] = {}

    def resolve(self, path: str, entry: str) -> str | None:
        """``path`` (relative to the root) with every link followed; None when it leaves the root."""
        todo = [p for p in path.split("/") if p not in ("", ".")]
        done: list[str] = []
        hops = 0
        while todo:
            part = todo.pop(0)
            if part == "..":
                if not done:
                    return None
                done.pop()
                continue
            target = self.links.get("/".join([*done, part]))
            if target is None:
                done.append(part)
                continue
            hops += 1
            if hops > MAX_LINK_HOPS:
                raise ArchiveError(f"entry {entry!r} is reached through more than {MAX_LINK_HOPS} links (a loop)",
                                   entry=entry)
            if posixpath.isabs(target):
                return None
            todo = [p for p in target.split("/") if p not in ("", ".")] + todo
        return "/".join(done)

    def check(self, m: tarfile.TarInfo) -> None:
        """Refuse ``m`` when the unpack would write it, or point it, outside the root; then record its link."""
        name = m.name
        parent = self.resolve(posixpath.dirname(name), name)
        if parent is None or self.resolve(name, name) is None:
            raise ArchiveError(f"entry {name!r} would be written outside the work dir through the links before it",
                               entry=name)
        if m.issym():
            if self.resolve(posixpath.join(posixpath.dirname(name), m.linkname), name) is None:
                raise ArchiveError(f"entry {name!r} is a symbolic link to {m.linkname!r}, which leaves the work dir "
                                   "through the links before it", entry=name)
            self.links[posixpath.join(parent, posixpath.basename(name)).lstrip("/")] = m.linkname
        elif m.islnk() and self.resolve(m.linkname, name) is None:
            raise ArchiveError(f"entry {name!r} is a hard link to {m.linkname!r}, which leaves the work dir "
                               "through the links before it", entry=name)


def check_archive(data: bytes, limits: Limits = Limits()) -> ArchiveInfo:
    """Check every entry of ``data`` (a .tar.gz); raise :class:`ArchiveError` on the first bad one."""
    if len(data) > limits.max_bytes:
        raise ArchiveError(f"the archive is {len(data)} bytes; the limit is {limits.max_bytes}", status=413)
    files = 0
    unpacked = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            tree = _Tree()
            for m in tar:
                _check_member(m)
                tree.check(m)
                files += 1
                unpacked += max(0, m.size)
                if files > limits.max_files:
                    raise ArchiveError(f"the archive has more than {limits.max_files} entries", entry=m.name,
                                       status=413)
                if unpacked > limits.max_unpacked_bytes:
                    raise ArchiveError(
                        f"the archive unpacks to more than {limits.max_unpacked_bytes} bytes "
                        f"(reached at entry {m.name!r})", entry=m.name, status=413)
    except (tarfile.TarError, gzip.BadGzipFile, EOFError, OSError, zlib.error) as exc:
        raise ArchiveError(f"not a readable .tar.gz archive: {exc}") from None
    return ArchiveInfo(hash=content_hash(data), size=len(data), unpacked_size=unpacked, files=files)


def unpack(data: bytes, dest: Path, limits: Limits = Limits()) -> ArchiveInfo:
    """Check, then extract into ``dest`` (created); tarfile's ``data`` filter guards again.

    The filter arrived in Python 3.11.4 (and in 3.8-3.10 security releases); before it, the same checks
    run in :func:`gpufleet.trainings.tarsafe.extract_data`."""
    from gpufleet.trainings.tarsafe import UnsafeEntry, extract_data

    info = check_archive(data, limits)
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")
        else:
            try:
                extract_data(tar, dest)
            except UnsafeEntry as exc:
                raise ArchiveError(str(exc), entry=exc.entry) from None
    return info


# Packing ---------------------------------------------------------------------

ALWAYS_IGNORED = (".git", ".hg", ".svn", "__pycache__", ".venv", "venv", ".mypy_cache", ".pytest_cache",
                  ".ruff_cache", "node_modules", ".ipynb_checkpoints", "*.pyc")


@dataclass
class IgnoreRules:
    """gitignore-style patterns (the common subset: globs, ``/``-anchored, ``dir/``, ``!`` negation)."""

    patterns: list[tuple[str, bool, bool, bool]]  # (glob, negated, dir_only, anchored)

    @classmethod
    def load(cls, root: Path) -> IgnoreRules:
        pats: list[tuple[str, bool, bool, bool]] = [(p, False, False, False) for p in ALWAYS_IGNORED]
        for fname in (".gitignore", ".gpufleetignore"):
            f = root / fname
            if not f.is_file():
                continue
            for raw in f.read_text(errors="replace").splitlines():
                line = raw.strip()
                if not line or line.startswith("#"):
                    continue
                neg = line.startswith("!")
                if neg:
                    line = line[1:]
                dir_only = line.endswith("/")
                line = line.rstrip("/")
                anchored = "/" in line
                pats.append((line.lstrip("/"), neg, dir_only, anchored))
        return cls(pats)

    def ignored(self, rel: str, is_dir: bool) -> bool:
        out = False
        base = rel.rsplit("/", 1)[-1]
        for glob, neg, dir_only, anchored in self.patterns:
            if dir_only and not is_dir:
                continue
            hit = fnmatch.fnmatchcase(rel, glob) if anchored else fnmatch.fnmatchcase(base, glob)
            if hit:
                out = not neg
        return out


class PackTooLarge(ValueError):
    def __init__(self, message: str, largest: list[tuple[str, int]]):
        super().__init__(message)
        self.largest = largest


def collect(root: Path) -> list[tuple[str, Path]]:
    """The files and folders to pack (relative POSIX name, path), ignore rules applied."""
    rules = IgnoreRules.load(root)
    out: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        rel_dir = Path(dirpath).relative_to(root).as_posix()
        rel_dir = "" if rel_dir == "." else rel_dir
        keep = []
        for d in sorted(dirnames):
            rel = f"{rel_dir}/{d}" if rel_dir else d
            p = Path(dirpath) / d
            if rules.ignored(rel, True):
                continue
            if p.is_symlink():
                out.append((rel, p))  # packed as a link, not followed
                continue
            keep.append(d)
            out.append((rel, p))
        dirnames[:] = keep
        for f in sorted(filenames):
            rel = f"{rel_dir}/{f}" if rel_dir else f
            if not rules.ignored(rel, False):
                out.append((rel, Path(dirpath) / f))
    return sorted(out)


def pack(root: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """A deterministic .tar.gz of ``root``; :class:`PackTooLarge` names the largest files when over."""
    entries = collect(root)
    sizes = [(rel, p.lstat().st_size) for rel, p in entries if p.is_file() and not p.is_symlink()]
    total = sum(s for _, s in sizes)
    largest = sorted(sizes, key=lambda x: -x[1])[:5]
    if total > max_bytes:
        shown = ", ".join(f"{r} ({s / 2**20:.1f} MB)" for r, s in largest)
        raise PackTooLarge(
            f"{root} holds {total / 2**20:.1f} MB to upload, over the {max_bytes / 2**20:.0f} MB limit; "
            f"largest: {shown}. List what the training does not need in .gpufleetignore", largest)
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w",
                                                                           format=tarfile.PAX_FORMAT) as tar:
        for rel, p in entries:
            ti = tar.gettarinfo(str(p), arcname=rel)
            ti.mtime = 0
            ti.uid = ti.gid = 0
            ti.uname = ti.gname = ""
            ti.mode = 0o755 if (ti.isdir() or (ti.mode & 0o111)) else 0o644
            if ti.isfile():
                with open(p, "rb") as fh:
                    tar.addfile(ti, fh)
            else:
                tar.addfile(ti)
    data = buf.getvalue()
    if len(data) > max_bytes:
        raise PackTooLarge(f"the packed archive is {len(data) / 2**20:.1f} MB, over the limit", largest)
    return data
