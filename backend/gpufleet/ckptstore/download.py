"""Resuming from the store: the newest complete checkpoint, downloaded into an attempt's folder, verified.

The files land under a temporary name in the training's checkpoint folder (by descriptor, created anew,
never through a link) and are renamed into place only once every one matched its manifest's size and
SHA-256, so the launcher never finds a half-downloaded checkpoint as its newest.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path, PurePosixPath

from gpufleet import memberfs
from gpufleet.ckptstore.client import Store, StoreError
from gpufleet.ckptstore.latest import read_latest
from gpufleet.ckptstore.manifest import FileEntry, Manifest

_CHUNK = 1 << 20


def newest_manifest(store: Store, training: str) -> Manifest | None:
    """The manifest ``latest`` names, or None when the training has nothing in the store."""
    latest, _ = read_latest(store, training)
    if latest is None:
        return None
    got = store.client.get_object(Bucket=store.bucket, Key=latest.manifest)
    return Manifest.from_json(got["Body"].read())


def _fetch_file(store: Store, key: str, folder: memberfs.Dir, rel: PurePosixPath, entry: FileEntry) -> None:
    if rel.parent != PurePosixPath("."):
        folder.make_dir(rel.parent)
    fd = folder.open_regular(rel, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    sha = hashlib.sha256()
    size = 0
    with os.fdopen(fd, "wb") as out:
        body = store.client.get_object(Bucket=store.bucket, Key=key)["Body"]
        for chunk in iter(lambda: body.read(_CHUNK), b""):
            sha.update(chunk)
            size += len(chunk)
            out.write(chunk)
    if size != entry.size or sha.hexdigest() != entry.sha256:
        raise StoreError(f"{key}: downloaded {size} bytes that do not match the manifest's {entry.size} "
                         "and SHA-256; the checkpoint was not used")


def _make_folder(ckpt_dir: Path, root: Path | None) -> None:
    if root is None:
        Path(ckpt_dir).parent.mkdir(parents=True, exist_ok=True)  # the checkpoint root: the server's
        with memberfs.Dir.root(Path(ckpt_dir).parent) as parent:
            parent.make_dir(Path(ckpt_dir).name, mode=None)
    else:
        with memberfs.Dir.root(root) as top:
            top.make_dir(memberfs.beneath(root, ckpt_dir), mode=None)


def fetch_newest(store: Store, training: str, ckpt_dir: Path, source: str | None = None, *,
                 root: Path | None = None, owner: tuple[int, int] | None = None) -> Manifest | None:
    """Download the newest complete checkpoint of ``source`` (else of ``training`` itself) into ``ckpt_dir``
    (a training's folder: its own name in the checkpoint root, or reached through no link below ``root``,
    a pool's root; made if missing), given to ``owner`` (uid, gid) when set; its manifest, or None."""
    manifest = newest_manifest(store, source or training)
    if manifest is None:
        return None
    base = store.key(manifest.training, "checkpoints", manifest.name, manifest.upload, "files")
    _make_folder(ckpt_dir, root)
    tmp = f".{manifest.name}.fetch.tmp"
    with memberfs.folder(ckpt_dir, root) as folder:
        folder.remove(tmp)
        folder.make_dir(tmp)
        try:
            with folder.sub(tmp) as staging:
                for entry in manifest.files:
                    _fetch_file(store, f"{base}/{entry.path}", staging, PurePosixPath(entry.path), entry)
            if owner is not None:
                folder.give_tree(tmp, *owner)
            folder.remove(manifest.name)
            folder.move(f"{tmp}/{manifest.name}", manifest.name)
        finally:
            folder.remove(tmp)
    return manifest
