"""Sessions resource: start, list, show, stop, extend, the shell's target, and admins' maximum lengths."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query, Request
from sqlalchemy.orm import Session

from gpufleet.api.auth import AuthUser
from gpufleet.api.deps import (
    AdminUser,
    CreatorUser,
    MemberUser,
    PageDep,
    SessionDep,
    SettingsDep,
    ViewerUser,
    ensure_can_cancel,
    ensure_can_run_code,
)
from gpufleet.api.hosts import UNKNOWN_HOST
from gpufleet.api.proxy.passes import TICKET_TTL_S, NotOpenable, open_link
from gpufleet.api.proxy.sessions_source import locator_of
from gpufleet.api.security.openapi import error_response
from gpufleet.config import Settings
from gpufleet.db.session import write_in
from gpufleet.jobs.scheduler_loop import wake
from gpufleet.interactive import limits, service, shell, view
from gpufleet.wire.sessions import (
    NotebookOpen,
    SessionCreate,
    SessionExtend,
    SessionLimitPublic,
    SessionLimitSet,
    SessionList,
    SessionPublic,
    SessionStatus,
    ShellTarget,
)
from gpufleet.trainings.admission.checks import TrainingRequestError

router = APIRouter(prefix="/api/v1/sessions", tags=["sessions"])
ENDED: dict[int | str, dict[str, Any]] = {409: error_response("The session has ended")}


def _http(exc: TrainingRequestError) -> HTTPException:
    return HTTPException(exc.status, str(exc))


def _one(sess: Session, settings: Settings, session_id: uuid.UUID) -> SessionPublic:
    try:
        [out] = view.publics(sess, settings, [service.get(sess, session_id)])
    except TrainingRequestError as exc:
        raise _http(exc) from None
    return out


def _owner(sess: Session, session_id: uuid.UUID) -> str:
    try:
        return service.get(sess, session_id)[0].owner
    except TrainingRequestError as exc:
        raise _http(exc) from None


@router.post("", response_model=SessionPublic, status_code=201, operation_id="sessions-create",
             responses=UNKNOWN_HOST)
def create_session(body: SessionCreate, db: SessionDep, settings: SettingsDep,
                   user: CreatorUser) -> SessionPublic:
    """Queue a session: GPUs reserved through the same queue, quotas and fair share as trainings."""
    ensure_can_run_code(db, user)  # a shell or a notebook runs the member's own code, as a script does
    try:
        with write_in(db, settings) as sess:
            service.check_priority(sess, settings, body.priority, user.name, user.role)
            t, side = service.create(sess, settings, body, user.name)
            out = view.public(settings, t, side)
    except TrainingRequestError as exc:
        raise _http(exc) from None
    wake()
    return out


@router.get("", response_model=SessionList, operation_id="sessions-list")
def list_sessions(db: SessionDep, settings: SettingsDep, page: PageDep, _user: ViewerUser,
                  status: Annotated[list[SessionStatus] | None, Query(description="one or more statuses")] = None,
                  owner: Annotated[str | None, Query(min_length=1, max_length=64)] = None) -> SessionList:
    wanted = sorted({s for st in status for s in view.TRAINING_STATUSES[st]}) if status else None
    rows, total = service.page(db, owner=owner, statuses=wanted, offset=page.offset, limit=page.limit)
    items = view.publics(db, settings, rows)
    if status:  # starting/running/stopping share the running row status
        items = [i for i in items if i.status in status]
    return SessionList(items=items, total=total)


@router.get("/limits", response_model=list[SessionLimitPublic], operation_id="sessions-limits")
def list_limits(db: SessionDep, _user: ViewerUser) -> list[SessionLimitPublic]:
    return [SessionLimitPublic(kind=r.subject_kind, name=r.subject, max_hours=r.max_hours, set_by=r.set_by)
            for r in limits.list_limits(db)]


@router.put("/limits/{kind}/{name}", response_model=SessionLimitPublic, operation_id="sessions-limits-set")
def set_limit(kind: Literal["user", "group"], name: str, body: SessionLimitSet, db: SessionDep,
              settings: SettingsDep, user: AdminUser) -> SessionLimitPublic:
    """The most hours (extensions included) the user's, or the group's members', sessions may last."""
    try:
        with write_in(db, settings) as sess:
            r = limits.set_limit(sess, kind, name, body.max_hours, user.name)
            return SessionLimitPublic(kind=r.subject_kind, name=r.subject, max_hours=r.max_hours, set_by=r.set_by)
    except TrainingRequestError as exc:
        raise _http(exc) from None


@router.get("/{session_id:uuid}", response_model=SessionPublic, operation_id="sessions-get")
def get_session(session_id: uuid.UUID, db: SessionDep, settings: SettingsDep,
                _user: ViewerUser) -> SessionPublic:
    return _one(db, settings, session_id)


@router.post("/{session_id:uuid}/stop", response_model=SessionPublic, operation_id="sessions-stop",
             responses={409: error_response("The session changed state during the stop; send it again")})
def stop_session(session_id: uuid.UUID, db: SessionDep, settings: SettingsDep,
                 user: MemberUser) -> SessionPublic:
    ensure_can_cancel(user, _owner(db, session_id))
    try:
        with write_in(db, settings) as sess:
            service.stop(sess, session_id, user.name)
    except TrainingRequestError as exc:
        raise _http(exc) from None
    wake()
    return _one(db, settings, session_id)


@router.post("/{session_id:uuid}/extend", response_model=SessionPublic, operation_id="sessions-extend",
             responses=ENDED)
def extend_session(session_id: uuid.UUID, body: SessionExtend, db: SessionDep, settings: SettingsDep,
                   user: MemberUser) -> SessionPublic:
    ensure_can_cancel(user, _owner(db, session_id))
    try:
        with write_in(db, settings) as sess:
            service.extend(sess, settings, session_id, user.name, body.hours)
    except TrainingRequestError as exc:
        raise _http(exc) from None
    return _one(db, settings, session_id)


@router.post("/{session_id:uuid}/shell", response_model=ShellTarget, operation_id="sessions-shell",
            responses=ENDED)
def shell_target(session_id: uuid.UUID, db: SessionDep, settings: SettingsDep,
                 user: MemberUser) -> ShellTarget:
    """Open a shell: where the session runs and the environment a shell in it gets; its owner (and admins) only."""
    _ensure_owner(user, _owner(db, session_id))
    try:
        return shell.target(db, settings, session_id)
    except TrainingRequestError as exc:
        raise _http(exc) from None


@router.post("/{session_id:uuid}/open", response_model=NotebookOpen, operation_id="sessions-open",
             responses={403: error_response("Not the session's owner (an admin joins instead)"),
                        404: error_response("No such session"), 409: error_response("Its notebook is not running")})
def open_notebook(session_id: uuid.UUID, request: Request, settings: SettingsDep,
                  user: ViewerUser) -> NotebookOpen:
    """A single-use address of the session's notebook on its own origin, for its owner: what the
    dashboard's Open button follows."""
    return _notebook_link(request, settings, user, str(session_id), joined=False)


@router.post("/{session_id:uuid}/join", response_model=NotebookOpen, operation_id="sessions-join",
             responses={404: error_response("No such session"), 409: error_response("Its notebook is not running")})
def join_notebook(session_id: uuid.UUID, request: Request, db: SessionDep, settings: SettingsDep,
                  user: AdminUser) -> NotebookOpen:
    """An admin's single-use address of another member's notebook: recorded on the session as an event,
    since her browser can then run code in it as its owner."""
    sid = str(session_id)
    owner = _owner(db, session_id)
    link = _notebook_link(request, settings, user, sid, joined=True)
    if owner != user.name:
        with write_in(db, settings) as sess:
            service.record_join(sess, session_id, user.name)
    return link


def _notebook_link(request: Request, settings: Settings, user: AuthUser, sid: str, joined: bool) -> NotebookOpen:
    notebook = locator_of(request.app)(settings, sid)
    dashboard = f"{request.url.scheme}://{request.url.netloc}"
    try:
        url = open_link(settings, user, notebook, sid, request.url.scheme, request.url.hostname or "127.0.0.1",
                        dashboard=dashboard, joined=joined)
    except NotOpenable as exc:
        raise HTTPException(exc.status, str(exc)) from None
    return NotebookOpen(url=url, expires_in_s=TICKET_TTL_S)


def _ensure_owner(user: AuthUser, owner: str) -> None:
    if user.name != owner and not user.is_admin:
        raise HTTPException(403, f"the session belongs to {owner!r}; only its owner may open a shell in it")
