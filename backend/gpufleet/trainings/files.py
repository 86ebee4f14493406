"""A training's files: its checkpoints and outputs, for its owner and admins to list and download.

Two folders belong to a training: its checkpoint dir
(``<checkpoint_root>/<id>/``, ``GPUFLEET_CHECKPOINT_DIR``) and its output dir
(``<data_dir>/outputs/<id>/``, ``GPUFLEET_OUTPUT_DIR``). A file is named by a
path relative to them, ``checkpoints/step-000100.pt`` or
``outputs/events.out.tfevents...``. A path that leaves its folder (``..``, an
absolute path, a symbolic link resolving outside) is refused, and gpufleet's
own files (the attempt fence) are neither listed nor served.
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


def roots(settings: Settings, training_id: uuid.UUID | str) -> dict[str, Path]:
    return {"checkpoints": checkpoint_dir(settings, training_id), "outputs": output_dir(settings, training_id)}


def _own(root_name: str, rel: Path) -> bool:
    return root_name == "checkpoints" and len(rel.parts) == 1 and rel.name in OWN_FILES


def list_files(settings: Settings, training_id: uuid.UUID) -> list[TrainingFile]:
    """Every regular file under the training's folders (symbolic links are not followed), sorted by path."""
    out: list[TrainingFile] = []
    for name, root in roots(settings, training_id).items():
        for folder, dirs, files in os.walk(root, followlinks=False):
            dirs.sort()
            for f in sorted(files):
                p = Path(folder) / f
                rel = p.relative_to(root)
                if _own(name, rel) or p.is_symlink():
                    continue
                try:
                    st = p.stat()
                except OSError:
                    continue  # gone since the walk saw it
                out.append(TrainingFile(f"{name}/{rel.as_posix()}", st.st_size,
                                        datetime.fromtimestamp(st.st_mtime, UTC)))
                if len(out) >= MAX_LISTED:
                    return out
    return out


def resolve(settings: Settings, training_id: uuid.UUID, path: str) -> Path:
    """The file ``path`` names, or :class:`FileRefused` (422 for a path that leaves its folder, 404 else)."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if path.startswith("/") or ".." in parts or "\\" in path:
        raise FileRefused(f"{path!r}: a path relative to the training's files, without '..'", 422)
    folders = roots(settings, training_id)
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


def open_file(settings: Settings, training_id: uuid.UUID, path: str) -> tuple[BinaryIO, os.stat_result, str]:
    """The file ``path`` names (checked by :func:`resolve`), open, its stat and its name.

    The folders are the training's account's, so its code may swap one for a
    link between the check and the read: the file is opened one folder at a
    time from the training's root, none through a link.
    """
    real = resolve(settings, training_id, path)
    root = os.path.realpath(roots(settings, training_id)[path.lstrip("/").split("/", 1)[0]])
    *folders, name = Path(os.path.relpath(real, root)).parts
    missing = FileRefused(f"the training has no file {path!r} (GET …/files lists them)", 404)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)  # the server's folder: its parent is not the training's
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
