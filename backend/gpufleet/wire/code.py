"""Schemas of the code resource (users' own code archives)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict


class CodePublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    hash: str
    size: int
    unpacked_size: int
    files: int
    created_by: str
    created_at: datetime


class CodeUploadPublic(CodePublic):
    created: bool  # false: the same code was stored already
