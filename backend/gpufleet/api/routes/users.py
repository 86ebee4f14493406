"""The team's users and API tokens, for admins: what `gpufleet users` and `gpufleet tokens` do on the server.

Every change is one committing transaction; a refusal is a 4xx naming what to
fix, and nothing is written. Unix-account mappings have their own route
(``runas``), since they decide whose files a user's code can reach.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Path, Query

from gpufleet.api.deps import AdminUser, SessionDep, SettingsDep, ViewerUser, ensure_second_step
from gpufleet.api.security.openapi import error_response
from gpufleet.api.user_writes import write
from gpufleet.users import directory
from gpufleet.users.accounts import add_user
from gpufleet.users.tokens import create_token, list_tokens, revoke_token
from gpufleet.wire.users import (
    TokenCreate,
    TokenCreated,
    TokenPublic,
    TokensPublic,
    UserCreate,
    UserPublic,
    UsersPublic,
    UserUpdate,
)

router = APIRouter(prefix="/api/v1", tags=["users"])
NamePath = Annotated[str, Path(min_length=1, max_length=64, description="a user name")]
T = TypeVar("T")
REFUSALS: dict[int | str, dict[str, Any]] = {404: error_response("No such user or token"),
                                             409: error_response("Already so, or the last admin"),
                                             403: error_response("Asked with the browser's sign-in alone: send the "
                                                                 "admin's token, or use the CLI")}




def _user_public(v: directory.UserView) -> UserPublic:
    return UserPublic(name=v.name, role=v.role, disabled=v.disabled, run_code=v.run_code,  # type: ignore[arg-type]
                      non_preemptible=v.non_preemptible, unix_account=v.unix_account, live_tokens=v.live_tokens,
                      groups=v.groups, created_at=v.created_at)


def _token_public(tok, owner: str) -> TokenPublic:
    return TokenPublic(id=tok.id, prefix=tok.prefix, user=owner, name=tok.name, created_at=tok.created_at,
                       expires_at=tok.expires_at, revoked_at=tok.revoked_at, last_used_at=tok.last_used_at)


@router.get("/users", response_model=UsersPublic, operation_id="users-list")
def list_team(sess: SessionDep, user: ViewerUser) -> UsersPublic:
    """Every user with role, permissions, Unix account, live tokens and groups (anyone signed in reads the team)."""
    data = [_user_public(v) for v in directory.user_views(sess)]
    return UsersPublic(data=data, count=len(data))


@router.post("/users", response_model=UserPublic, status_code=201, operation_id="users-create", responses=REFUSALS)
def create_user(body: UserCreate, settings: SettingsDep, user: AdminUser) -> UserPublic:
    """Add a user (admins only, with the token or the CLI: not the browser's sign-in alone); a name already
    taken is a 409."""
    ensure_second_step(user, "adding a user")

    def make(sess) -> UserPublic:
        add_user(sess, body.name, body.role)
        return _user_public(directory.user_view(sess, body.name))

    return write(settings, make)


@router.patch("/users/{name}", response_model=UserPublic, operation_id="users-update", responses=REFUSALS)
def update_user(name: NamePath, body: UserUpdate, settings: SettingsDep, user: AdminUser) -> UserPublic:
    """Change a user's role, state or permissions (admins only, with the token or the CLI: not the browser's
    sign-in alone); the last active admin stays one."""
    ensure_second_step(user, "changing a user's role, state or permissions")
    change = directory.UserChange(role=body.role, disabled=body.disabled, run_code=body.run_code,
                                  non_preemptible=body.non_preemptible)
    return _user_public(write(settings, lambda s: directory.update_user(s, name, change)))


@router.get("/tokens", response_model=TokensPublic, operation_id="tokens-list")
def list_team_tokens(
    sess: SessionDep,
    user: ViewerUser,
    of: Annotated[str | None, Query(alias="user", min_length=1, max_length=64, description="only this user's")] = None,
) -> TokensPublic:
    """API tokens by their prefix, the secrets are never stored: every one for admins, one's own for others."""
    if user.role != "admin" and of not in (None, user.name):
        return TokensPublic(data=[], count=0)
    data = [_token_public(t, owner) for t, owner in list_tokens(sess, of if user.role == "admin" else user.name)]
    return TokensPublic(data=data, count=len(data))


@router.post("/tokens", response_model=TokenCreated, status_code=201, operation_id="tokens-create",
             responses=REFUSALS)
def create_team_token(body: TokenCreate, settings: SettingsDep, user: AdminUser) -> TokenCreated:
    """Create a token for a user (admins only, with the token or the CLI: not the browser's sign-in alone);
    its secret is in this answer only."""
    ensure_second_step(user, "creating an API token")

    def make(sess) -> TokenCreated:
        made = create_token(sess, body.user, body.name, body.expires_days)
        tok, owner = next((t, o) for t, o in list_tokens(sess, made.user) if t.id == made.id)
        return TokenCreated(**_token_public(tok, owner).model_dump(), secret=made.secret)

    return write(settings, make)


@router.post("/tokens/{token_id}/revoke", response_model=TokenPublic, operation_id="tokens-revoke",
             responses=REFUSALS)
def revoke_team_token(token_id: Annotated[uuid.UUID, Path(description="a token's id")], settings: SettingsDep,
                      user: AdminUser) -> TokenPublic:
    """Revoke a token at once; browser sessions opened with it end too (admins only)."""
    def revoke(sess) -> TokenPublic:
        tok = revoke_token(sess, str(token_id))
        return next(_token_public(t, o) for t, o in list_tokens(sess) if t.id == tok.id)

    return write(settings, revoke)
