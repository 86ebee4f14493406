"""Dependencies shared by the routes, as Annotated aliases.

Who may do what:
- ``ViewerUser`` / ``CurrentUser``: any signed-in user (viewers read only).
- ``MemberUser``: admin or member (may create trainings, cancel their own).
- ``CreatorUser``: a ``MemberUser`` that is also within its rate limit and its
  cap of queued trainings — use it on routes that create trainings.
- ``AdminUser``: admin (cancel any training, drain GPUs).
- ``can_cancel(user, owner)`` / ``ensure_can_cancel(user, owner)`` for ownership.
- ``ensure_can_run_code(session, user)``: may submit its own code (script trainings).
- ``ensure_may_rank(session, settings, user, reqs)``: a priority within the user's cap, and
  ``preemptible: false`` only with the ``non_preemptible`` permission.
- ``PageDep``: bounded ``limit`` / ``offset`` query parameters.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool
from sqlalchemy.orm import Session

from gpufleet.api.auth import AuthError, AuthUser, resolve_user
from gpufleet.api.security.gate import STATE_KEY
from gpufleet.api.security.ratelimits import check_create_allowed, requested_count
from gpufleet.config import Settings
from gpufleet.db.session import session_factory
from gpufleet.wire.training_requests import TrainingCreate


def get_settings_dep(request: Request) -> Settings:
    return request.app.state.settings


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]


def get_session(settings: SettingsDep) -> Iterator[Session]:
    sess = session_factory(settings)()
    try:
        yield sess
    finally:
        sess.close()


SessionDep = Annotated[Session, Depends(get_session)]


def get_current_user(request: Request, settings: SettingsDep) -> AuthUser:
    cached = getattr(request.state, STATE_KEY, None)
    if isinstance(cached, AuthUser):
        return cached
    try:
        user = resolve_user(settings, request.method, request.headers, request.cookies,
                            secure=request.url.scheme == "https")
    except AuthError as exc:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        raise HTTPException(exc.status, exc.reason, headers=headers) from None
    setattr(request.state, STATE_KEY, user)
    return user


CurrentUser = Annotated[AuthUser, Depends(get_current_user)]
# What proves a request was not made by a browser on its own: a token it sent, or the server's Unix socket.
# Single-user mode's implicit admin (``local``) has no browser credential to ride on: every loopback caller is
# that admin already, by the mode's choice.
SECOND_STEP_VIA = frozenset({"token", "socket", "local"})


def ensure_second_step(user: AuthUser, what: str) -> None:
    """Refuse (403) ``what`` to a request the browser's credentials alone could have made.

    A page the signed-in person merely opened can send their cookie; it
    cannot send their token, nor connect to the server's Unix socket. So
    what outlasts the page (a sign-in link, where a member's code runs) needs
    one of those: the token re-entered in the request itself, or the CLI.
    """
    if user.via in SECOND_STEP_VIA:
        return
    raise HTTPException(403, f"{what} needs a second step beyond the browser's sign-in: send your API token with"
                             " this request (Authorization: Bearer …), or use the CLI on the server"
                             " (it talks over the server's Unix socket)")
# Any signed-in user may read; the alias says so at the route.
ViewerUser = CurrentUser


def require_member(user: CurrentUser) -> AuthUser:
    if not user.can_write:
        raise HTTPException(
            403, f"user {user.name!r} has the {user.role} role, which may only read; ask an admin for the member role"
        )
    return user


MemberUser = Annotated[AuthUser, Depends(require_member)]


def require_admin(user: CurrentUser) -> AuthUser:
    if not user.is_admin:
        raise HTTPException(403, f"only an admin may do this; user {user.name!r} has the {user.role} role")
    return user


AdminUser = Annotated[AuthUser, Depends(require_admin)]


async def require_creator(request: Request, user: MemberUser, settings: SettingsDep, session: SessionDep) -> AuthUser:
    # Async only to read the (cached) body: a batch counts its items against the cap.
    count = requested_count(await request.body())
    await run_in_threadpool(check_create_allowed, request.app, settings, session, user, count)
    return user


CreatorUser = Annotated[AuthUser, Depends(require_creator)]


def can_cancel(user: AuthUser, training_owner: str) -> tuple[bool, str]:
    """Whether ``user`` may cancel a training owned by ``training_owner``, and why."""
    if user.is_admin:
        return True, f"{user.name} is an admin"
    if user.role == "viewer":
        return False, f"user {user.name!r} has the viewer role, which may only read"
    if user.name == training_owner:
        return True, f"{user.name} owns the training"
    return False, f"the training belongs to {training_owner!r}; only its owner or an admin may cancel it"


def ensure_can_cancel(user: AuthUser, training_owner: str) -> None:
    ok, reason = can_cancel(user, training_owner)
    if not ok:
        raise HTTPException(403, reason)


def ensure_can_run_code(session: Session, user: AuthUser) -> None:
    """403 unless ``user`` may submit its own code (admins; users granted ``run_code``)."""
    from gpufleet.trainings.permissions import may_run_code

    ok, reason = may_run_code(session, user.name, user.role)
    if not ok:
        raise HTTPException(403, reason)


def ensure_may_rank(session: Session, settings: Settings, user: AuthUser, reqs: Sequence[TrainingCreate]) -> None:
    """403, naming the cap and who set it or the permission, unless ``user`` may rank ``reqs`` so."""
    from gpufleet.trainings.permissions import rank_refusal

    reason = rank_refusal(session, settings, reqs, user.name, user.role)
    if reason is not None:
        raise HTTPException(403, reason)


MAX_PAGE_SIZE = 500
DEFAULT_PAGE_SIZE = 50


@dataclass(frozen=True)
class Page:
    limit: int
    offset: int


def page_params(
    limit: int = Query(DEFAULT_PAGE_SIZE, ge=1, le=MAX_PAGE_SIZE, description="items per page"),
    offset: int = Query(0, ge=0, le=1_000_000, description="items to skip"),
) -> Page:
    return Page(limit=limit, offset=offset)


PageDep = Annotated[Page, Depends(page_params)]
