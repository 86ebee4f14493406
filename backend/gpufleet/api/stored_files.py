"""A training's files in the checkpoint store, beside those in its folders (Files page, ``trainings files``
and ``trainings download``): listed as ``store/<checkpoint>/<file>``, streamed from the store. The caller has
checked that the user may read the training's files; a path is served only if it is one listed."""

from __future__ import annotations

import logging
import uuid
from urllib.parse import quote

from fastapi import HTTPException
from fastapi.responses import StreamingResponse

from gpufleet.ckptstore.listing import PREFIX, StoredFile, find, read, stored_files
from gpufleet.jobs import ckpt_uploads

log = logging.getLogger(__name__)

__all__ = ["PREFIX", "download", "listed"]


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
