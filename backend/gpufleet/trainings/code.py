"""Code blobs: a user's archive, stored once per content hash."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session, defer

from gpufleet.config import CodeSettings, StoreSettings
from gpufleet.db.models import CodeBlob
from gpufleet.trainings.archive import ArchiveError, ArchiveInfo, Limits, check_archive, content_hash, unpack

HASH_LEN = 64


def limits_of(settings: CodeSettings) -> Limits:
    return Limits(max_bytes=settings.code_max_bytes, max_unpacked_bytes=settings.code_max_unpacked_bytes,
                  max_files=settings.code_max_files)


def check_hash(value: str) -> str:
    v = value.strip().lower()
    if len(v) != HASH_LEN or any(c not in "0123456789abcdef" for c in v):
        raise ArchiveError(f"{value!r} is not a code hash (64 hex digits, the sha256 of the archive)", status=422)
    return v


def get_blob_info(sess: Session, code_hash: str) -> CodeBlob | None:
    return sess.execute(
        select(CodeBlob).where(CodeBlob.hash == code_hash)
        .options(defer(CodeBlob.content))
    ).scalar_one_or_none()


def store(sess: Session, settings: CodeSettings, data: bytes, user: str,
          expected_hash: str | None = None) -> tuple[ArchiveInfo, bool]:
    """Check ``data`` and store it unless that hash is stored already; returns (info, created).

    Raises :class:`ArchiveError` before anything is written. The caller commits.
    """
    if expected_hash is not None:
        expected_hash = check_hash(expected_hash)
        if content_hash(data) != expected_hash:
            raise ArchiveError(f"the upload's sha256 is {content_hash(data)}, not {expected_hash} as declared; "
                               "the upload was damaged or the hash is wrong", status=422)
    info = check_archive(data, limits_of(settings))
    if get_blob_info(sess, info.hash) is not None:
        return info, False
    sess.add(CodeBlob(hash=info.hash, size=info.size, unpacked_size=info.unpacked_size, files=info.files,
                      content=data, created_by=user))
    sess.flush()
    return info, True


def code_cache(settings: StoreSettings, code_hash: str) -> Path:
    return settings.data_dir / "code" / f"{code_hash}.tar.gz"


def fetch(settings: StoreSettings, sess: Session, code_hash: str) -> bytes:
    """The archive's bytes, from this host's cache or the database (then cached)."""
    path = code_cache(settings, code_hash)
    if path.is_file():
        cached = path.read_bytes()
        if content_hash(cached) == code_hash:
            return cached
    data = sess.execute(select(CodeBlob.content).where(CodeBlob.hash == code_hash)).scalar_one_or_none()
    if data is None:
        raise ArchiveError(f"code {code_hash} is not stored on the server", status=404)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{uuid.uuid4().hex}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return data


def prepare_workdir(store_settings: StoreSettings, code_settings: CodeSettings, sess: Session, code_hash: str,
                    dest: Path) -> ArchiveInfo:
    """Unpack the code into ``dest`` (emptied first: every attempt starts from the code as uploaded)."""
    import shutil

    if dest.exists():
        shutil.rmtree(dest)
    return unpack(fetch(store_settings, sess, code_hash), dest, limits_of(code_settings))
