"""One committing write of a user, group or quota change, its refusal a 4xx (the team's routes share it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from fastapi import HTTPException

from gpufleet.db.session import write_session
from gpufleet.users.accounts import UserError

T = TypeVar("T")


def refusal_status(message: str) -> int:
    """404 for what does not exist, 409 for what is already so (or would leave no admin), else 422."""
    if message.startswith("no "):
        return 404
    if "already" in message or "is not in group" in message or "last active admin" in message:
        return 409
    return 422


def write(settings, fn: Callable[..., T]) -> T:
    """Run ``fn`` in one committing transaction; a refusal is a 4xx and nothing is written."""
    try:
        with write_session(settings) as sess:
            return fn(sess)
    except UserError as exc:
        raise HTTPException(refusal_status(str(exc)), str(exc)) from None
