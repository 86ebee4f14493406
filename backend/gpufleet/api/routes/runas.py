"""Which Unix account a user's trainings run as (``gpufleet.users.runas``): an admin's mapping."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path
from pydantic import BaseModel, Field

from gpufleet.api.deps import AdminUser, SettingsDep
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


class UnixAccountPublic(UnixAccount):
    user: str


@router.put("/users/{name}/unix-account", response_model=UnixAccountPublic, operation_id="users-set-unix-account",
            responses={404: error_response("No such user")})
def set_unix_account(name: NamePath, body: UnixAccount, settings: SettingsDep, user: AdminUser) -> UnixAccountPublic:
    """Map a user to the Unix account their trainings run as on the worker hosts (admins only)."""
    try:
        with write_session(settings) as sess:
            set_mapping(sess, name, body.unix_account)
    except UserError as exc:
        raise HTTPException(404 if str(exc).startswith("no user") else 422, str(exc)) from None
    return UnixAccountPublic(user=name, unix_account=body.unix_account)
