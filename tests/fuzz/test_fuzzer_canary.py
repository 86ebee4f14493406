"""The fuzzer itself must fail on the bugs it is there to find.

A tiny app behind the same auth layer has one route that answers 500 for some
inputs, one whose body does not match its declared schema and one that breaks
on NaN or Infinity; the harness of test_schema.py must report all three, and
pass a correct route.
"""

from __future__ import annotations

import pytest
import schemathesis
from fastapi import APIRouter, FastAPI, Query
from pydantic import BaseModel
from schemathesis import GenerationMode

from fuzz.test_schema import _fuzz, _fuzz_non_finite
from gpufleet.config import Settings


class Count(BaseModel):
    count: int


class Ratio(BaseModel):
    x: float = 0.0


def _app(settings: Settings) -> FastAPI:
    from gpufleet.api.app import guarded_app

    router = APIRouter()

    @router.get("/api/v1/boom", response_model=Count, operation_id="boom")
    def boom(n: int = Query(ge=0, le=100)) -> Count:
        if n > 3:
            raise RuntimeError("bug")
        return Count(count=n)

    @router.get("/api/v1/liar", responses={200: {"model": Count}}, operation_id="liar")
    def liar() -> dict:
        return {"count": "many"}

    @router.post("/api/v1/ratio", response_model=Count, operation_id="ratio")
    def ratio(body: Ratio) -> Count:
        return Count(count=int(body.x))  # int(nan) raises

    @router.get("/api/v1/fine", response_model=Count, operation_id="fine")
    def fine(n: int = Query(ge=0, le=100)) -> Count:
        return Count(count=n)

    return guarded_app(settings, router)


@pytest.fixture
def canary(settings: Settings):
    # Loopback embedded default: the implicit local admin, no token needed.
    from gpufleet.db.session import upgrade_database

    upgrade_database(settings)
    app = _app(settings)
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    ops = {op.path: op for op in (r.ok() for r in schema.get_all_operations())}
    return {**ops, "app": app, "raw": schema.raw_schema}


def test_a_server_error_fails_the_run(canary) -> None:
    # In process the app's exception comes through as is; over HTTP it is a 500.
    with pytest.raises(BaseException, match="bug|Server error"):
        _fuzz(canary["/api/v1/boom"], GenerationMode.POSITIVE, {})


def test_a_body_that_breaks_its_schema_fails_the_run(canary) -> None:
    with pytest.raises(BaseException, match="violates schema"):
        _fuzz(canary["/api/v1/liar"], GenerationMode.POSITIVE, {})


def test_a_correct_route_passes(canary) -> None:
    assert _fuzz(canary["/api/v1/fine"], GenerationMode.POSITIVE, {}) >= 1
    assert _fuzz(canary["/api/v1/fine"], GenerationMode.NEGATIVE, {}) >= 1


def test_a_route_that_breaks_on_nan_or_infinity_fails_the_run(canary) -> None:
    from fastapi.testclient import TestClient

    with TestClient(canary["app"], raise_server_exceptions=False) as client:
        with pytest.raises(BaseException, match="500|Server error"):
            _fuzz_non_finite(canary["/api/v1/ratio"], client, {}, canary["raw"])
        # An operation without a JSON body has no number to replace.
        assert _fuzz_non_finite(canary["/api/v1/fine"], client, {}, canary["raw"]) == 0
