"""The 422 answer for a request FastAPI could not validate: every wrong field, and what was sent where it is safe.

FastAPI's own answer echoes each wrong value (``input``) and the error's
context. A body may carry NaN or Infinity (Python's JSON reader takes them),
which no JSON answer can hold, so echoing them turned a refusal into a 500.
Here a value is echoed only when it is plain JSON; otherwise the entry keeps
its field (``loc``) and message and drops the value.
"""

from __future__ import annotations

import math
from typing import Any

from fastapi import Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse


def is_plain_json(value: Any) -> bool:
    """True when ``value`` is JSON without NaN or Infinity anywhere in it."""
    if isinstance(value, float):
        return math.isfinite(value)
    if value is None or isinstance(value, (bool, int, str)):
        return True
    if isinstance(value, dict):
        return all(isinstance(k, str) and is_plain_json(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return all(is_plain_json(v) for v in value)
    return False


def _public(error: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in error.items() if k in ("type", "loc", "msg")}
    if "input" in error and is_plain_json(error["input"]):
        out["input"] = error["input"]
    ctx = {k: v if is_plain_json(v) else str(v) for k, v in (error.get("ctx") or {}).items()}
    if ctx:
        out["ctx"] = {k: v for k, v in ctx.items() if is_plain_json(v)}
    return out


def public_errors(errors: Any) -> list[dict[str, Any]]:
    """FastAPI's error list, with only values that JSON can carry."""
    return [_public(dict(e)) for e in errors]


async def validation_failed(request: Request, exc: Exception) -> JSONResponse:
    """The handler for :class:`RequestValidationError` (registered by ``api.app``)."""
    assert isinstance(exc, RequestValidationError)
    return JSONResponse({"detail": jsonable_encoder(public_errors(exc.errors()))}, status_code=422)
