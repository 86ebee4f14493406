"""Code resource: upload a user's code archive (content-addressed), and ask whether a hash is stored.

``POST /api/v1/code`` takes the raw bytes of a .tar.gz (``Content-Type:
application/octet-stream``). Every entry is checked before anything is
written; a bad entry is a 4xx that names it. The same bytes are stored once.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query, Request
from fastapi.concurrency import run_in_threadpool

from gpufleet.api.deps import MemberUser, SessionDep, SettingsDep, ViewerUser, ensure_can_run_code
from gpufleet.wire.code import CodePublic, CodeUploadPublic
from gpufleet.config import Settings
from gpufleet.db.session import write_session
from gpufleet.trainings import code as codes
from gpufleet.trainings.archive import ArchiveError

router = APIRouter(prefix="/api/v1/code", tags=["code"])


def _store(settings: Settings, data: bytes, user: str, expected: str | None) -> CodeUploadPublic:
    with write_session(settings) as sess:
        info, created = codes.store(sess, settings, data, user, expected)
        row = codes.get_blob_info(sess, info.hash)
        return CodeUploadPublic(created=created, **CodePublic.model_validate(row).model_dump())


@router.post(
    "", response_model=CodeUploadPublic, status_code=201, operation_id="code-upload",
    openapi_extra={"requestBody": {"required": True, "content": {
        "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}},
)
async def upload_code(
    request: Request, session: SessionDep, settings: SettingsDep, user: MemberUser,
    sha256: Annotated[str | None, Query(max_length=64, description="the archive's sha256, checked if given")] = None,
) -> CodeUploadPublic:
    """Store a .tar.gz of a user's code; returns its hash (the same code is stored once)."""
    await run_in_threadpool(ensure_can_run_code, session, user)
    session.close()
    data = await request.body()
    if not data:
        raise HTTPException(422, "the body is empty; send the .tar.gz archive as application/octet-stream")
    try:
        return await run_in_threadpool(_store, settings, data, user.name, sha256)
    except ArchiveError as exc:
        raise HTTPException(exc.status, str(exc)) from None


@router.get("/{code_hash}", response_model=CodePublic, operation_id="code-get")
def get_code(
    code_hash: Annotated[str, Path(pattern="^[0-9a-fA-F]{64}$", description="the archive's sha256, 64 hex digits")],
    session: SessionDep, _user: ViewerUser,
) -> CodePublic:
    """Whether the server holds this code (200) or not (404): a client uploads only what is missing."""
    try:
        h = codes.check_hash(code_hash)
    except ArchiveError as exc:
        raise HTTPException(422, str(exc)) from None
    row = codes.get_blob_info(session, h)
    if row is None:
        raise HTTPException(404, f"code {h} is not stored; upload it with POST /api/v1/code")
    return CodePublic.model_validate(row)
