"""A training's files in the checkpoint store, beside those in its folders (Files page, ``trainings files``
and ``trainings download``): listed as ``store/<checkpoint>/<file>``, streamed from the store. The caller has
checked that the user may read the training's files; a path is served only if it is one listed."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from urllib.parse import quote

from fastapi import HTTPException
from fastapi.responses import StreamingResponse

from gpufleet.ckptstore.listing import PREFIX, StoredFile, bytes_by_training, find, read, stored_files
from gpufleet.jobs import ckpt_uploads

log = logging.getLogger(__name__)

__all__ = ["PREFIX", "StoredBytes", "download", "listed", "stored_bytes"]

# The usage page asks for the store's bytes each minute per open page: one listing serves them all for a while.
STORED_BYTES_TTL_S = 60.0
_bytes_lock = threading.Lock()
_bytes_cache: tuple[float, str, dict[str, int]] | None = None


def listed(training_id: uuid.UUID) -> list[StoredFile]:
    uploads = ckpt_uploads.current()
    if uploads is None:
        return []
    try:
        return stored_files(uploads.store, str(training_id))
    except Exception as exc:  # noqa: BLE001 - the store away: the folders' files are still listed
        log.warning("listing the checkpoint store for %s: %s", training_id, exc)
        return []


def download(training_id: uuid.UUID, path: str) -> StreamingResponse:
    uploads = ckpt_uploads.current()
    f = find(uploads.store, str(training_id), path) if uploads is not None else None
    if uploads is None or f is None:
        raise HTTPException(404, f"the training has no file {path!r} (GET …/files lists them)")
    name = path.rsplit("/", 1)[-1]
    return StreamingResponse(read(uploads.store, f), media_type="application/octet-stream",
                             headers={"Content-Length": str(f.size),
                                      # the name is the member's: quoted, never raw in a header
                                      "Content-Disposition": f"attachment; filename*=utf-8''{quote(name)}"})


class StoredBytes:
    """What the usage page says of the store: its address, its bytes per training id, or why it cannot."""

    def __init__(self, url: str | None, per_training: dict[str, int] | None, error: str | None = None):
        self.url, self.per_training, self.error = url, per_training, error


def stored_bytes() -> StoredBytes:
    """The checkpoint store's bytes per training id, listed at most once a minute (None: no store is set)."""
    global _bytes_cache
    uploads = ckpt_uploads.current()
    if uploads is None:
        return StoredBytes(None, None)
    store = uploads.store
    with _bytes_lock:
        if _bytes_cache is not None and _bytes_cache[1] == store.url and \
                time.monotonic() - _bytes_cache[0] < STORED_BYTES_TTL_S:
            return StoredBytes(store.url, _bytes_cache[2])
        try:
            sizes = bytes_by_training(store)
        except Exception as exc:  # noqa: BLE001 - the store away: GPU time is still shown, and why bytes are not
            log.warning("listing the checkpoint store %s for usage: %s", store.url, exc)
            return StoredBytes(store.url, None, f"the checkpoint store {store.url} did not answer a listing ({exc})")
        _bytes_cache = (time.monotonic(), store.url, sizes)
        return StoredBytes(store.url, sizes)

