"""Uploading one complete checkpoint: every file, verified, then its manifest, then ``latest``.

The checkpoint is the member's: her files are read by descriptor below the checkpoint root, through no
link (gpufleet.memberfs), only regular files; a link or a FIFO she left there is not uploaded. Each file
goes through the SDK's managed transfer (multipart above its threshold, parts retried, each request's
checksum checked by the store) while its SHA-256 is taken as it is read; then the store's copy is checked
(its size) before the manifest, which carries each file's SHA-256 for the download to check, is written.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
import uuid
from pathlib import Path, PurePosixPath
from typing import Any

from gpufleet import memberfs
from gpufleet.ckptstore.client import Store, StoreError
from gpufleet.ckptstore.latest import advance
from gpufleet.ckptstore.manifest import FileEntry, Manifest
from gpufleet.engine.resumepoint import step_in_name


class _HashingReader:
    """A file read once, front to back, its SHA-256 and length taken on the way. It offers no ``seek``,
    so the transfer reads it in order (and keeps each part it retries in memory)."""

    def __init__(self, fh: Any):
        self._fh = fh
        self.sha = hashlib.sha256()
        self.size = 0

    def read(self, n: int = -1) -> bytes:
        data = self._fh.read(n)
        self.sha.update(data)
        self.size += len(data)
        return bytes(data)


def checkpoint_files(folder: memberfs.Dir, name: str) -> list[PurePosixPath]:
    """The regular files of the checkpoint ``name`` (a file, or a folder and all below it), no link."""
    st = folder.entry(name)
    if st is None:
        raise FileNotFoundError(f"checkpoint {name} is not in the checkpoint dir")
    if stat.S_ISREG(st.st_mode):
        return [PurePosixPath(name)]
    if stat.S_ISDIR(st.st_mode):
        return [PurePosixPath(name) / rel for rel, _ in folder.files(name)]
    raise StoreError(f"checkpoint {name} is neither a file nor a folder; not uploaded")


def _put_file(store: Store, folder: memberfs.Dir, rel: PurePosixPath, key: str) -> FileEntry:
    fd = folder.open_regular(str(rel))
    with os.fdopen(fd, "rb") as fh:
        reader = _HashingReader(fh)
        # Each request carries the SDK's checksum (CRC32), which the store checks on arrival.
        store.client.upload_fileobj(reader, store.bucket, key, Config=store.transfer)
    return FileEntry(str(rel), reader.size, reader.sha.hexdigest())


def _verify(store: Store, key: str, entry: FileEntry) -> None:
    """The store holds the whole file read: its size (each part's bytes were checked by the store against
    the SDK's checksum on arrival; the file's SHA-256, in the manifest, is checked at every download)."""
    head = store.client.head_object(Bucket=store.bucket, Key=key)
    if int(head["ContentLength"]) != entry.size:
        raise StoreError(f"{key}: the store holds {head['ContentLength']} bytes, {entry.size} were sent")


def upload_checkpoint(store: Store, training: str, ckpt_dir: Path, name: str, *, metrics: dict[str, float]
                      | None = None, attempt: int | None = None, host: str | None = None,
                      root: Path | None = None) -> Manifest:
    """Upload the checkpoint ``name`` of ``ckpt_dir`` (a training's checkpoint folder: its own name in the
    checkpoint root, or reached through no link below ``root``, a pool's root) and move ``latest`` to it if
    it is the newest; its manifest."""
    manifest = Manifest(training=training, name=name, step=step_in_name(name), upload=uuid.uuid4().hex,
                        uploaded_at=time.time(), metrics=dict(metrics or {}), attempt=attempt, host=host)
    base = store.key(training, "checkpoints", name, manifest.upload)
    with memberfs.folder(ckpt_dir, root) as folder:
        for rel in checkpoint_files(folder, name):
            key = f"{base}/files/{rel}"
            entry = _put_file(store, folder, rel, key)
            _verify(store, key, entry)
            manifest.files.append(entry)
    manifest_key = f"{base}/manifest.json"
    store.client.put_object(Bucket=store.bucket, Key=manifest_key, Body=manifest.to_json(),
                            ContentType="application/json", IfNoneMatch="*")
    advance(store, manifest, manifest_key)
    return manifest
