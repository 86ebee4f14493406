"""What the store holds of a training, as its Files page lists it: ``store/<checkpoint>/<file>`` for every
complete checkpoint kept there (its newest upload by name), and one of those files read back."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from gpufleet.ckptstore.client import Store
from gpufleet.ckptstore.manifest import FileEntry, Manifest
from gpufleet.ckptstore.retention import complete

PREFIX = "store"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class StoredFile:
    path: str  # "store/step-40/model.bin"
    size: int
    modified: datetime
    key: str


def stored_files(store: Store, training: str) -> list[StoredFile]:
    """Every file of the training's complete checkpoints in the store, newest checkpoint first."""
    newest: dict[str, tuple[str, Manifest]] = {}
    for folder, m in complete(store, training):  # oldest first: a later upload of a name wins
        newest[m.name] = (folder, m)
    out = []
    for folder, m in sorted(newest.values(), key=lambda fm: fm[1].order(), reverse=True):
        when = datetime.fromtimestamp(m.uploaded_at, UTC)
        out += [StoredFile(f"{PREFIX}/{f.path}", f.size, when, f"{folder}/files/{f.path}") for f in m.files]
    return out


def bytes_by_training(store: Store) -> dict[str, int]:
    """Bytes the store holds now under each training's folder (by training id): every object there, its
    checkpoints' files, their manifests and its ``latest``. One listing of the prefix, a page per 1000 keys."""
    base = store.key()
    lead = f"{base}/" if base else ""
    sizes: dict[str, int] = {}
    for page in store.client.get_paginator("list_objects_v2").paginate(Bucket=store.bucket, Prefix=lead):
        for obj in page.get("Contents", []):
            training, below, _ = obj["Key"][len(lead):].partition("/")
            if below:  # not a key of the prefix's own (the start-up probe)
                sizes[training] = sizes.get(training, 0) + int(obj["Size"])
    return sizes


def find(store: Store, training: str, path: str) -> StoredFile | None:
    """The stored file ``path`` names exactly (as listed), or None: no key is ever built from ``path``."""
    return next((f for f in stored_files(store, training) if f.path == path), None)


def read(store: Store, f: StoredFile) -> Iterator[bytes]:
    body = store.client.get_object(Bucket=store.bucket, Key=f.key)["Body"]
    try:
        yield from iter(lambda: body.read(_CHUNK), b"")
    finally:
        body.close()


__all__ = ["PREFIX", "FileEntry", "StoredFile", "bytes_by_training", "find", "read", "stored_files"]
