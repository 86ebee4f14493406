"""Signing in and out, who am I, and WebSocket and download tickets.

The dashboard signs in once with an API token, or with a single-use link that
`gpufleet open` asks for over the server's socket; either answer sets the same
HTTP-only, SameSite=Strict session cookie and hands the page its session's page
key (in the answer's body, or in the link's redirect fragment), which it sends
beside the cookie on every request (:mod:`gpufleet.api.pagekey`). The cookie
names a row in ``browser_sessions``; signing out ends that row. WebSockets and
downloads, which carry no header, take single-use tickets asked for here.
Scripts skip all this and send ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response
from fastapi.responses import RedirectResponse

from gpufleet.api.auth import (
    AuthError,
    AuthUser,
    make_session_cookie,
    make_sign_in_link,
    make_ws_ticket,
    redeem_sign_in_link,
    resolve_user,
    session_cookie_name,
    session_cookie_of,
    session_of_cookie,
)
from gpufleet.api import pagekey
from gpufleet.api.deps import CurrentUser, SettingsDep, ensure_second_step
from gpufleet.wire.auth import (
    DownloadTicket, DownloadTicketAsk, SignedIn, SignedOut, SignIn, SignInLink, WhoAmI, WSTicket,
)
from gpufleet.api.security.asgi import LINK_PATH
from gpufleet.api.security.openapi import error_response
from gpufleet.config import Settings
from gpufleet.api.security.origins import origin_allowed
from gpufleet.api.security.policy import auth_required
from gpufleet.api.security.ratelimits import count_sign_in_failure
from gpufleet.db.session import session_scope, write_session
from gpufleet.users.tokens import attempted_owner
from gpufleet.users.signin import end_session

router = APIRouter(prefix="/api/v1/auth", tags=["auth"])
# The sign-in link's redirect hands the page its key as ``/#gpufleet-key=<key>``.
PAGE_KEY_FRAGMENT = "gpufleet-key"


def _whoami(user: AuthUser, required: bool) -> WhoAmI:
    return WhoAmI(name=user.name, role=user.role, via=user.via, auth_required=required)


def _source(request: Request) -> str:
    """Who is signing in, by address: uvicorn puts the forwarded one here only for a configured proxy."""
    return request.client.host if request.client else "unknown"


async def _count_malformed(request: Request, settings: SettingsDep) -> None:
    """A body that does not parse is a failed sign-in too (it is refused before the route runs)."""
    try:
        SignIn.model_validate_json(await request.body())
    except ValueError:
        count_sign_in_failure(request.app, settings, _source(request), None)


@router.post("/sign-in", response_model=SignedIn, operation_id="auth-sign-in")
def sign_in(body: SignIn, request: Request, response: Response, settings: SettingsDep,
            _counted: Annotated[None, Depends(_count_malformed)]) -> SignedIn:
    """Exchange an API token for an HTTP-only session cookie and its page key.

    The cookie counts only beside the page key, sent as the ``X-Gpufleet-Key`` header: keep the key in the
    page's own storage, never in a cookie.

    Failed sign-ins are limited per source and per account the token was meant for (429 past
    the limit); a valid token always signs in, whatever others have failed.
    """
    # A page on another site must not sign the browser in as someone else.
    if not origin_allowed(request.headers.get("origin"), request.headers.get("host"), settings):
        raise HTTPException(403, "sign-in from this Origin is not allowed (GPUFLEET_CORS_ORIGINS)")
    token = body.token.strip()
    try:
        user = resolve_user(settings, "GET", {"authorization": f"Bearer {token}"}, {})
    except AuthError as exc:
        with session_scope(settings) as sess:
            meant_for = attempted_owner(sess, token)
        count_sign_in_failure(request.app, settings, _source(request), meant_for)
        raise HTTPException(401, exc.reason) from None
    key = set_session_cookie(response, request, settings, user)
    return SignedIn(name=user.name, role=user.role, via="session", auth_required=auth_required(settings),
                    page_key=key)


def set_session_cookie(response: Response, request: Request, settings: Settings, user: AuthUser) -> str:
    """Open a browser session for ``user``: the one way every sign-in sets the session cookie. Returns the
    session's page key, for the page that signed in and nobody else.

    Over https it is ``__Host-gpufleet_session``: Secure, Path=/ and no Domain, so only this exact host
    name gets it and no other (a notebook's) can set it. Over plain http (the loopback default) the
    browser takes no prefixed cookie, so it is ``gpufleet_session``, host-only all the same.
    """
    secure = request.url.scheme == "https"
    cookie, key = make_session_cookie(settings, user)
    response.set_cookie(
        session_cookie_name(secure),
        cookie,
        max_age=settings.session_ttl_s,
        httponly=True,
        # Strict: the cookie never rides on a request started by another site.
        samesite="strict",
        secure=secure,
        path="/",
    )
    return key


def local_base(settings: Settings) -> str:
    """This server's address for a browser on the same machine."""
    host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(settings.host, settings.host)
    return f"http://{f'[{host}]' if ':' in host else host}:{settings.port}"


def new_sign_in_link(settings: Settings, user: AuthUser) -> SignInLink:
    """A single-use link that signs a browser on this machine in as ``user`` (`gpufleet open`, `serve --link`)."""
    path = f"{LINK_PATH}?code={quote(make_sign_in_link(settings, user))}"
    return SignInLink(url=local_base(settings) + path, path=path, expires_in_s=settings.sign_in_link_ttl_s)


@router.post("/sign-in-link", response_model=SignInLink, operation_id="auth-sign-in-link",
             responses={400: error_response("Single-user mode: a browser on this machine needs no sign-in"),
                        403: error_response("Asked with the browser's cookie alone: send the token, or use the CLI")})
def sign_in_link(user: CurrentUser, settings: SettingsDep) -> SignInLink:
    """A single-use link, valid a few minutes, that signs a browser in as the caller (`gpufleet open`).

    Not for a browser's cookie alone (a page could ask for one and pass it on): the caller's token or
    the server's Unix socket."""
    if user.id is None:
        raise HTTPException(400, "single-user mode: a browser on this machine needs no sign-in")
    ensure_second_step(user, "a sign-in link")
    return new_sign_in_link(settings, user)


@router.get("/link", operation_id="auth-link", response_class=RedirectResponse, status_code=303,
            responses={401: error_response("The link was used already, has expired or is not valid")})
def follow_sign_in_link(request: Request, settings: SettingsDep,
                        code: str = Query(min_length=1, max_length=2048)) -> RedirectResponse:
    """Sign this browser in with a link from `gpufleet open`, then go to the dashboard.

    The page key rides in the redirect's fragment, which the browser keeps to itself (no request, log or
    Referer carries a fragment); the dashboard moves it into its storage and drops it from the address."""
    user = redeem_sign_in_link(request.app, settings, code)
    if isinstance(user, str):
        raise HTTPException(401, user)
    response = RedirectResponse("/", status_code=303)
    key = set_session_cookie(response, request, settings, user)
    response.headers["location"] = f"/#{PAGE_KEY_FRAGMENT}={key}"
    return response


@router.post("/sign-out", response_model=SignedOut, operation_id="auth-sign-out")
def sign_out(request: Request, response: Response, settings: SettingsDep) -> SignedOut:
    """End this browser's session and drop its cookie (revoke the token to end every session opened with it)."""
    secure = request.url.scheme == "https"
    session_id = session_of_cookie(settings, session_cookie_of(request.cookies, secure))
    if session_id is not None:
        # Ended on the server: a copy of the cookie kept elsewhere stops working too.
        with write_session(settings) as sess:
            end_session(sess, session_id)
    response.delete_cookie(session_cookie_name(secure), path="/", httponly=True, samesite="strict", secure=secure)
    return SignedOut(signed_out=True)


@router.get("/whoami", response_model=WhoAmI, operation_id="auth-whoami")
def whoami(user: CurrentUser, settings: SettingsDep) -> WhoAmI:
    """The user this request acts as (``local`` on a loopback server without sign-in)."""
    return _whoami(user, auth_required(settings))


@router.post("/ws-ticket", response_model=WSTicket, operation_id="auth-ws-ticket")
def ws_ticket(user: CurrentUser, settings: SettingsDep) -> WSTicket:
    """A single-use ticket, valid for a few seconds, to open ``/api/v1/ws?ticket=…``."""
    return WSTicket(ticket=make_ws_ticket(settings, user), expires_in_s=settings.ws_ticket_ttl_s, url="/api/v1/ws")


@router.post("/download-ticket", response_model=DownloadTicket, operation_id="auth-download-ticket")
def download_ticket(body: DownloadTicketAsk, user: CurrentUser, settings: SettingsDep) -> DownloadTicket:
    """A single-use link, valid seconds, to download one of a training's files by navigating to it.

    A download carries no header, so the dashboard asks for this (with its cookie and page key) and then
    opens the link; whether the file may be read is checked when it is opened."""
    path = body.path
    if not pagekey.downloadable(path):
        raise HTTPException(422, "a download ticket is for a training's file: /api/v1/trainings/<id>/files/<path>")
    ticket = pagekey.make_download_ticket(settings, user.id, user.token_id, user.session_id, path)
    return DownloadTicket(url=f"{path}?ticket={quote(ticket)}", expires_in_s=pagekey.DOWNLOAD_TICKET_TTL_S)
