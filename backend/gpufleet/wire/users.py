"""Bodies of the team's users and API tokens (the dashboard's admin area, any REST client)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from gpufleet.bounds import RequestBody

NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"
Role = Literal["admin", "member", "viewer"]


class UserCreate(RequestBody):
    name: str = Field(min_length=1, max_length=64, pattern=NAME_PATTERN, description="lowercase user name, e.g. alice")
    role: Role = Field(default="member", description="admin: everything; member: runs work; viewer: reads only")


class UserUpdate(RequestBody):
    """The fields to change; a missing field stays as it is."""

    role: Role | None = Field(default=None, description="the user's new role")
    disabled: bool | None = Field(default=None, description="true: every token and session of theirs stops at once")
    run_code: bool | None = Field(default=None, description="may run their own code (script trainings, sessions)")
    non_preemptible: bool | None = Field(default=None,
                                         description="may ask for trainings no higher-priority one can preempt")


class UserPublic(BaseModel):
    name: str
    role: Role
    disabled: bool
    run_code: bool
    non_preemptible: bool
    unix_account: str | None = Field(description="the Unix account their work runs as; null: the same-name rule")
    live_tokens: int
    groups: list[str]
    created_at: datetime


class UsersPublic(BaseModel):
    data: list[UserPublic]
    count: int


class TokenCreate(RequestBody):
    user: str = Field(min_length=1, max_length=64, pattern=NAME_PATTERN, description="the user the token acts as")
    name: str = Field(default="default", min_length=1, max_length=128, description="a label, e.g. laptop or ci")
    expires_days: int | None = Field(default=None, ge=1, le=3650, description="days until it expires; null: never")


class TokenPublic(BaseModel):
    id: uuid.UUID
    prefix: str = Field(description="the token's first characters, to recognise it by")
    user: str
    name: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None


class TokenCreated(TokenPublic):
    secret: str = Field(description="the token itself; shown in this answer only, never stored")


class TokensPublic(BaseModel):
    data: list[TokenPublic]
    count: int
