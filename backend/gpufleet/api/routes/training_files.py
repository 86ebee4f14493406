"""A training's continuation and its files: resume, list, download (streamed, with ``Range``)."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse

from gpufleet.api import stored_files as stored
from gpufleet.api.deps import CreatorUser, SessionDep, SettingsDep, ViewerUser, ensure_can_cancel, ensure_can_run_code
from gpufleet.api.training_answers import http_error, load, publics
from gpufleet.wire.trainings import TrainingFilePublic, TrainingFilesPublic, TrainingPublic
from gpufleet.api.security.openapi import error_response
from gpufleet import workkinds
from gpufleet.db.session import write_in
from gpufleet.jobs.scheduler_loop import wake
from gpufleet.pools import service as pools
from gpufleet.trainings import files, resume, service
from gpufleet.wire.training_requests import TrainingResume

router = APIRouter(prefix="/api/v1/trainings", tags=["trainings"])


def _ensure_owner_or_admin(user: ViewerUser, owner: str) -> None:
    if not (user.is_admin or user.name == owner):
        raise HTTPException(403, f"the training belongs to {owner!r}; only its owner and admins may read its files")


@router.post(
    "/{training_id}/resume", response_model=TrainingPublic, operation_id="trainings-resume",
    responses={409: error_response("The training has not ended (or changed state during the resume)")},
)
def resume_training(
    training_id: uuid.UUID, session: SessionDep, settings: SettingsDep, user: CreatorUser,
    body: TrainingResume | None = None,
) -> TrainingPublic:
    """Continue an ended training (succeeded, failed, cancelled, reclaimed) from its newest checkpoint.

    The same training: status back to ``queued``, a fresh restart budget; ``config`` may change fields
    of a recipe's config (a larger ``max_steps``) first.
    """
    t = load(session, training_id)
    ensure_can_cancel(user, t.owner)  # the same rule: its owner or an admin
    if workkinds.of(t.kind).runs_member_code:
        ensure_can_run_code(session, user)
    try:
        with write_in(session, settings) as sess:
            row = resume.resume(sess, training_id, body or TrainingResume(), user.name)
            [out] = publics(service.views(sess, [row]))
    except service.TrainingRequestError as exc:
        raise http_error(exc) from None
    wake()
    return out


OWNER_ONLY: dict[int | str, dict[str, Any]] = {
    403: error_response("Another member's training: only its owner and admins read its files")}


@router.get("/{training_id}/files", response_model=TrainingFilesPublic, operation_id="trainings-files",
            responses=OWNER_ONLY)
def list_files(
    training_id: uuid.UUID, session: SessionDep, settings: SettingsDep, user: ViewerUser,
) -> TrainingFilesPublic:
    """The training's checkpoints (``checkpoints/…``) and outputs (``outputs/…``): its owner and admins."""
    t = load(session, training_id)
    _ensure_owner_or_admin(user, t.owner)
    data = [TrainingFilePublic(path=f.path, size=f.size, modified=f.modified)
            for f in files.list_files(settings, settings, training_id, pools.training_home(session, t))]
    data += [TrainingFilePublic(path=f.path, size=f.size, modified=f.modified)
             for f in stored.listed(training_id)]  # what the checkpoint store holds (store/…), if one is set
    return TrainingFilesPublic(data=data, count=len(data))


@router.get(
    "/{training_id}/files/{path:path}", operation_id="trainings-file",
    response_class=FileResponse,
    responses={200: {"description": "the file's bytes", "content": {"application/octet-stream": {}}},
               206: {"description": "the bytes of the asked Range",
                     "content": {"application/octet-stream": {}}},
               416: error_response("The Range lies outside the file"), **OWNER_ONLY},
)
def download_file(
    training_id: uuid.UUID, path: str, session: SessionDep, settings: SettingsDep, user: ViewerUser,
) -> FileResponse:
    """One file, streamed; a ``Range: bytes=a-b`` header gets those bytes (206)."""
    t = load(session, training_id)
    _ensure_owner_or_admin(user, t.owner)
    if path.startswith(f"{stored.PREFIX}/"):
        return stored.download(training_id, path)  # type: ignore[return-value]
    try:
        fh, st, name = files.open_file(settings, settings, training_id, path, pools.training_home(session, t))
    except files.FileRefused as exc:
        raise HTTPException(exc.status, str(exc)) from None
    # Served from the file opened above (the name may lead elsewhere by now); it closes with the response.
    response = FileResponse(f"/proc/self/fd/{fh.fileno()}", stat_result=st, media_type="application/octet-stream",
                            filename=name)
    response.opened = fh  # type: ignore[attr-defined]
    return response
