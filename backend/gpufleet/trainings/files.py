"""A training's files: its checkpoints and outputs, for its owner and admins to list and download.

Two folders belong to a training: its checkpoint dir
(``<checkpoint_root>/<id>/``, ``GPUFLEET_CHECKPOINT_DIR``) and its output dir
(``<data_dir>/outputs/<id>/``, ``GPUFLEET_OUTPUT_DIR``). A file is named by a
path relative to them, ``checkpoints/step-000100.pt`` or
``outputs/events.out.tfevents...``. A path that leaves its folder (``..``, an
absolute path, a symbolic link resolving outside) is refused, and gpufleet's
own files (the attempt fence) are neither listed nor served. Every folder
and file is reached through gpufleet.memberfs: a link anywhere in them is
neither listed nor served, whether it leads inside the folder or out.

A training in a Slurm pool keeps both in its folder under the pool's
checkpoint root (``home``: ``<root>/<id>/checkpoints`` and ``…/output``), which
its owner's account owns: each folder is opened from ``home`` without
following a link, so the member cannot swap one for a link to files that are
not theirs.
"""

from __future__ import annotations

import errno
import os
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from gpufleet import memberfs
from gpufleet.config import StoreSettings, WorkerSettings
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


def checkpoint_dir(settings: WorkerSettings, training_id: uuid.UUID | str) -> Path:
    return Path(settings.checkpoint_root) / str(training_id)  # type: ignore[arg-type]


def output_dir(settings: StoreSettings, training_id: uuid.UUID | str) -> Path:
    return settings.data_dir / "outputs" / str(training_id)


POOL_FOLDERS = {"checkpoints": "checkpoints", "outputs": "output"}  # under a pool training's home


def roots(store_settings: StoreSettings, worker_settings: WorkerSettings, training_id: uuid.UUID | str,
          home: Path | None = None) -> dict[str, Path]:
    """The training's folders by the name its file paths start with; ``home``: a pool training's folder."""
    if home is not None:
        return {name: home / leaf for name, leaf in POOL_FOLDERS.items()}
    return {"checkpoints": checkpoint_dir(worker_settings, training_id),
            "outputs": output_dir(store_settings, training_id)}


def _open_root(root: Path, home: Path | None) -> memberfs.Dir:
    """One of the training's folders, by descriptor. A team host's folder sits in the server's own
    checkpoint root or outputs folder; a pool training's in its home, which its owner's account owns (whose
    entry only root may replace): opened from ``home`` without following a link."""
    if home is None:
        return memberfs.Dir.root(root)
    return memberfs.Dir.under(home, root.name)


def _own(root_name: str, rel: Path) -> bool:
    return root_name == "checkpoints" and len(rel.parts) == 1 and rel.name in OWN_FILES


def list_files(store_settings: StoreSettings, worker_settings: WorkerSettings, training_id: uuid.UUID,
               home: Path | None = None) -> list[TrainingFile]:
    """Every regular file under the training's folders (symbolic links are not followed), sorted by path."""
    out: list[TrainingFile] = []
    for name, root in roots(store_settings, worker_settings, training_id, home).items():
        try:
            folder = _open_root(root, home)
        except OSError:
            continue  # not made yet, or not a folder of the training's
        with folder:
            for rel, st in folder.files():
                if _own(name, Path(rel)):
                    continue
                out.append(TrainingFile(f"{name}/{rel.as_posix()}", st.st_size,
                                        datetime.fromtimestamp(st.st_mtime, UTC)))
                if len(out) >= MAX_LISTED:
                    return out
    return out


def named(store_settings: StoreSettings, worker_settings: WorkerSettings, training_id: uuid.UUID, path: str,
          home: Path | None) -> tuple[Path, Path]:
    """The training's folder ``path`` starts in and the rest of ``path``; :class:`FileRefused` (422) for a
    path that leaves its folder, 404 for one of gpufleet's own files."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if path.startswith("/") or ".." in parts or "\\" in path:
        raise FileRefused(f"{path!r}: a path relative to the training's files, without '..'", 422)
    folders = roots(store_settings, worker_settings, training_id, home)
    if not parts or parts[0] not in folders:
        raise FileRefused(f"{path!r}: paths start with checkpoints/ or outputs/", 422)
    rel = Path(*parts[1:]) if len(parts) > 1 else Path()
    if _own(parts[0], rel) or not rel.parts:
        raise FileRefused(f"the training has no file {path!r} (GET …/files lists them)", 404)
    return folders[parts[0]], rel


def open_file(store_settings: StoreSettings, worker_settings: WorkerSettings, training_id: uuid.UUID, path: str,
              home: Path | None = None) -> tuple[BinaryIO, os.stat_result, str]:
    """The file ``path`` names, open, its stat and its name.

    The folders are the training's account's, so its code may put a link
    anywhere in them, or swap a folder for one between any check and the
    read: the file is opened from the training's folder through no link at
    any component (gpufleet.memberfs), and only if it is a regular file.
    """
    root, rel = named(store_settings, worker_settings, training_id, path, home)
    try:
        with _open_root(root, home) as folder:
            fd = folder.open_regular(rel.as_posix())
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise FileRefused(f"{path!r} is a link or goes through one: links in a training's files may lead "
                              "outside them and are never served", 422) from None
        raise FileRefused(f"the training has no file {path!r} (GET …/files lists them)", 404) from None
    return os.fdopen(fd, "rb"), os.fstat(fd), rel.name
