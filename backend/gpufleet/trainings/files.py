"""A training's files: its checkpoints and outputs, for its owner and admins to list and download.

Two folders belong to a training: its checkpoint dir
(``<checkpoint_root>/<id>/``, ``GPUFLEET_CHECKPOINT_DIR``) and its output dir
(``<data_dir>/outputs/<id>/``, ``GPUFLEET_OUTPUT_DIR``). A file is named by a
path relative to them, ``checkpoints/step-000100.pt`` or
``outputs/events.out.tfevents...``. A path that leaves its folder (``..``, an
absolute path, a symbolic link resolving outside) is refused, and gpufleet's
own files (the attempt fence) are neither listed nor served.

A training in a Slurm pool keeps both in its folder under the pool's
checkpoint root (``home``: ``<root>/<id>/checkpoints`` and ``…/output``), which
its owner's account owns: each folder is opened from ``home`` without
following a link, so the member cannot swap one for a link to files that are
not theirs.
"""

from __future__ import annotations

import os
import stat
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from gpufleet.config import Settings
from gpufleet.engine.resumepoint import OWN_FILES

MAX_LISTED = 10000


class FileRefused(ValueError):
    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


@dataclass
class TrainingFile:
    path: str
    size: int
    modified: datetime


def checkpoint_dir(settings: Settings, training_id: uuid.UUID | str) -> Path:
    return Path(settings.checkpoint_root) / str(training_id)  # type: ignore[arg-type]


def output_dir(settings: Settings, training_id: uuid.UUID | str) -> Path:
    return settings.data_dir / "outputs" / str(training_id)


POOL_FOLDERS = {"checkpoints": "checkpoints", "outputs": "output"}  # under a pool training's home


def roots(settings: Settings, training_id: uuid.UUID | str, home: Path | None = None) -> dict[str, Path]:
    """The training's folders by the name its file paths start with; ``home``: a pool training's folder."""
    if home is not None:
        return {name: home / leaf for name, leaf in POOL_FOLDERS.items()}
    return {"checkpoints": checkpoint_dir(settings, training_id), "outputs": output_dir(settings, training_id)}


def _open_root(root: Path, home: Path | None) -> int:
    """A directory fd of one of the training's folders. A team host's folder is the server's own; a pool
    training's is its owner's, so it is opened from ``home`` (whose entry only root may replace) without
    following a link."""
    if home is None:
        return os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    parent = os.open(home, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return os.open(root.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
    finally:
        os.close(parent)


def _own(root_name: str, rel: Path) -> bool:
    return root_name == "checkpoints" and len(rel.parts) == 1 and rel.name in OWN_FILES


def list_files(settings: Settings, training_id: uuid.UUID, home: Path | None = None) -> list[TrainingFile]:
    """Every regular file under the training's folders (symbolic links are not followed), sorted by path."""
    out: list[TrainingFile] = []
    for name, root in roots(settings, training_id, home).items():
        try:
            fd = _open_root(root, home)
        except OSError:
            continue  # not made yet, or not a folder of the training's
        try:
            for folder, dirs, files, dir_fd in os.fwalk(".", dir_fd=fd, follow_symlinks=False):
                dirs.sort()
                for f in sorted(files):
                    rel = Path(folder, f)
                    try:
                        st = os.stat(f, dir_fd=dir_fd, follow_symlinks=False)
                    except OSError:
                        continue  # gone since the walk saw it
                    if _own(name, rel) or not stat.S_ISREG(st.st_mode):
                        continue
                    out.append(TrainingFile(f"{name}/{rel.as_posix()}", st.st_size,
                                            datetime.fromtimestamp(st.st_mtime, UTC)))
                    if len(out) >= MAX_LISTED:
                        return out
        finally:
            os.close(fd)
    return out


def resolve(settings: Settings, training_id: uuid.UUID, path: str, home: Path | None = None) -> Path:
    """The file ``path`` names, or :class:`FileRefused` (422 for a path that leaves its folder, 404 else)."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if path.startswith("/") or ".." in parts or "\\" in path:
        raise FileRefused(f"{path!r}: a path relative to the training's files, without '..'", 422)
    folders = roots(settings, training_id, home)
    if not parts or parts[0] not in folders:
        raise FileRefused(f"{path!r}: paths start with checkpoints/ or outputs/", 422)
    root = folders[parts[0]]
    rel = Path(*parts[1:]) if len(parts) > 1 else Path()
    target = root.joinpath(rel)
    real_root = os.path.realpath(root)
    real = os.path.realpath(target)
    if os.path.commonpath([real_root, real]) != real_root:
        raise FileRefused(f"{path!r} leads outside the training's files", 422)
    if _own(parts[0], rel) or not os.path.isfile(real):
        raise FileRefused(f"the training has no file {path!r} (GET …/files lists them)", 404)
    return Path(real)


def open_file(settings: Settings, training_id: uuid.UUID, path: str,
              home: Path | None = None) -> tuple[BinaryIO, os.stat_result, str]:
    """The file ``path`` names (checked by :func:`resolve`), open, its stat and its name.

    The folders are the training's account's, so its code may swap one for a
    link between the check and the read: the file is opened one folder at a
    time from the training's root, none through a link.
    """
    real = resolve(settings, training_id, path, home)
    folder_path = roots(settings, training_id, home)[path.lstrip("/").split("/", 1)[0]]
    root = os.path.realpath(folder_path)
    *folders, name = Path(os.path.relpath(real, root)).parts
    missing = FileRefused(f"the training has no file {path!r} (GET …/files lists them)", 404)
    try:
        fd = _open_root(folder_path, home)  # the server's folder, or a pool training's opened without a link
    except OSError:
        raise missing from None
    try:
        for folder in folders:
            inner = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = inner
        file_fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
    except OSError:
        raise missing from None
    finally:
        os.close(fd)
    fh = os.fdopen(file_fd, "rb")
    st = os.fstat(file_fd)
    if not stat.S_ISREG(st.st_mode):
        fh.close()
        raise missing
    return fh, st, name
