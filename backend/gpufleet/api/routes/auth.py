"""Signing in and out, who am I, and WebSocket tickets.

The dashboard signs in once with an API token; the answer sets an HTTP-only,
SameSite=Strict session cookie that later requests (and WebSockets) carry. The
cookie names a row in ``browser_sessions``; signing out ends that row.
Scripts skip all this and send ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request, Response

from gpufleet.api.auth import (
    SESSION_COOKIE,
    AuthError,
    AuthUser,
    make_session_cookie,
    make_ws_ticket,
    resolve_user,
    session_of_cookie,
)
from gpufleet.api.deps import CurrentUser, SettingsDep
from gpufleet.api.schemas.auth import SignedOut, SignIn, WhoAmI, WSTicket
from gpufleet.api.security.origins import origin_allowed
from gpufleet.api.security.policy import auth_required
from gpufleet.api.security.ratelimits import check_sign_in_rate
from gpufleet.db.session import write_session
from gpufleet.users.sessions import end_session

router = APIRouter(prefix="/api/v1/auth", tags=["auth"])


def _whoami(user: AuthUser, required: bool) -> WhoAmI:
    return WhoAmI(name=user.name, role=user.role, via=user.via, auth_required=required)


@router.post("/sign-in", response_model=WhoAmI, operation_id="auth-sign-in")
def sign_in(body: SignIn, request: Request, response: Response, settings: SettingsDep) -> WhoAmI:
    """Exchange an API token for an HTTP-only session cookie."""
    check_sign_in_rate(request.app, settings, request.client.host if request.client else "unknown")
    # A page on another site must not sign the browser in as someone else.
    if not origin_allowed(request.headers.get("origin"), request.headers.get("host"), settings):
        raise HTTPException(403, "sign-in from this Origin is not allowed (GPUFLEET_CORS_ORIGINS)")
    try:
        user = resolve_user(settings, "GET", {"authorization": f"Bearer {body.token.strip()}"}, {})
    except AuthError as exc:
        raise HTTPException(401, exc.reason) from None
    response.set_cookie(
        SESSION_COOKIE,
        make_session_cookie(settings, user),
        max_age=settings.session_ttl_s,
        httponly=True,
        # Strict: the cookie never rides on a request started by another site.
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    return WhoAmI(name=user.name, role=user.role, via="session", auth_required=auth_required(settings))


@router.post("/sign-out", response_model=SignedOut, operation_id="auth-sign-out")
def sign_out(request: Request, response: Response, settings: SettingsDep) -> SignedOut:
    """End this browser's session and drop its cookie (revoke the token to end every session opened with it)."""
    session_id = session_of_cookie(settings, request.cookies.get(SESSION_COOKIE))
    if session_id is not None:
        # Ended on the server: a copy of the cookie kept elsewhere stops working too.
        with write_session(settings) as sess:
            end_session(sess, session_id)
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict",
                           secure=request.url.scheme == "https")
    return SignedOut(signed_out=True)


@router.get("/whoami", response_model=WhoAmI, operation_id="auth-whoami")
def whoami(user: CurrentUser, settings: SettingsDep) -> WhoAmI:
    """The user this request acts as (``local`` on a loopback server without sign-in)."""
    return _whoami(user, auth_required(settings))


@router.post("/ws-ticket", response_model=WSTicket, operation_id="auth-ws-ticket")
def ws_ticket(user: CurrentUser, settings: SettingsDep) -> WSTicket:
    """A single-use ticket, valid for a few seconds, to open ``/api/v1/ws?ticket=…``."""
    return WSTicket(ticket=make_ws_ticket(settings, user), expires_in_s=settings.ws_ticket_ttl_s, url="/api/v1/ws")
