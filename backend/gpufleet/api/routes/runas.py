"""Which Unix account a user's trainings run as (``gpufleet.users.runas``): an admin's mapping."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path
from pydantic import BaseModel, Field

from gpufleet.api.deps import AdminUser, SettingsDep, ensure_second_step
from gpufleet.api.security.openapi import error_response
from gpufleet.db.session import write_session
from gpufleet.users.accounts import UserError
from gpufleet.users.runas import set_mapping

router = APIRouter(prefix="/api/v1", tags=["users"])
NamePath = Annotated[str, Path(min_length=1, max_length=64, description="a user name")]


class UnixAccount(BaseModel):
    unix_account: str | None = Field(
        default=None, min_length=1, max_length=32, pattern=r"^[a-z_][a-z0-9_.-]*\$?$",
        description="the Unix account this user's trainings run as; null: the user's own account "
                    "of the same name if there is one, else the run account")


class UnixAccountSet(UnixAccount):
    force: bool = Field(default=False, description="map even onto an account another gpufleet user's trainings "
                                                   "run as (that user's of the same name, or one mapped to it)")


class UnixAccountPublic(UnixAccount):
    user: str


@router.put("/users/{name}/unix-account", response_model=UnixAccountPublic, operation_id="users-set-unix-account",
            responses={404: error_response("No such user"),
                       403: error_response("Asked with the browser's cookie alone: send the token, or use the CLI"),
                       409: error_response("The account is another user's; give force to map onto it anyway")})
def set_unix_account(name: NamePath, body: UnixAccountSet, settings: SettingsDep,
                     user: AdminUser) -> UnixAccountPublic:
    """Map a user to the Unix account their trainings run as on the worker hosts (admins; with a token or on
    the server's socket, never the browser's cookie alone)."""
    ensure_second_step(user, "mapping a user to a Unix account")
    try:
        with write_session(settings) as sess:
            set_mapping(sess, name, body.unix_account, force=body.force, by=user.name)
    except UserError as exc:
        status = 404 if str(exc).startswith("no user") else 409 if "belongs to" in str(exc) else 422
        raise HTTPException(status, str(exc)) from None
    return UnixAccountPublic(user=name, unix_account=body.unix_account)
