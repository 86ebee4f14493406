"""NaN, Infinity and numbers past any use are a 422 naming the field, never a 500 or a stored null.

Python's JSON reader takes ``NaN`` and ``Infinity``; JSON answers cannot hold
them. The refusal must not echo them, every float a request may carry has
finite bounds in the schema, and a sign-in body that does not parse still
counts toward the sign-in limit.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from fastapi.testclient import TestClient
from gpufleet.api.app import create_app
from gpufleet.api.security.ratelimits import SIGN_IN_FAILURES_PER_MINUTE
from gpufleet.config import Settings
from gpufleet.db.session import upgrade_database
from gpufleet.telemetry.inventory import register_host
from gpufleet.engine.recipes import get_recipe, recipe_names

JSON = {"content-type": "application/json"}


@pytest.fixture
def app_client(on_settings: Settings):
    settings = on_settings.model_copy(update={"simulate": "2xH100-80GB"})
    upgrade_database(settings)
    register_host(settings)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


def _fields(answer: dict[str, Any]) -> str:
    """Every field a 422 names, in its locations and its messages."""
    detail = answer["detail"]
    if isinstance(detail, str):
        return detail
    return " ".join(".".join(map(str, e["loc"])) + " " + e["msg"] for e in detail)


@pytest.mark.parametrize("body", ['{"token": NaN}', '{"token": Infinity}', '{"token": -Infinity}'])
def test_sign_in_with_a_non_finite_token_is_a_422(app_client: TestClient, body: str) -> None:
    r = app_client.post("/api/v1/auth/sign-in", content=body, headers=JSON)
    assert r.status_code == 422, r.text
    assert "token" in _fields(r.json())
    assert "NaN" not in r.text and "Infinity" not in r.text


def test_bad_sign_in_bodies_count_toward_the_sign_in_limit(app_client: TestClient) -> None:
    codes = [app_client.post("/api/v1/auth/sign-in", content='{"token": NaN}', headers=JSON).status_code
             for _ in range(SIGN_IN_FAILURES_PER_MINUTE + 1)]
    assert codes[:SIGN_IN_FAILURES_PER_MINUTE] == [422] * SIGN_IN_FAILURES_PER_MINUTE
    assert codes[-1] == 429


@pytest.mark.parametrize(("config", "field"), [
    ('{"lr": 1e308}', "lr"),
    ('{"lr": Infinity}', "lr"),
    ('{"lr": NaN}', "lr"),
    ('{"ddp_bucket_mb": 1e308}', "ddp_bucket_mb"),
    ('{"grad_clip": -Infinity}', "grad_clip"),
    ('{"l1_coeff": 1e300}', "l1_coeff"),
    ('{"anything": {"deep": [1, NaN]}}', "anything"),
])
def test_a_training_with_a_number_past_its_bounds_is_refused_and_nothing_written(
        app_client: TestClient, people: Any, config: str, field: str) -> None:
    auth = {"Authorization": f"Bearer {people.admin}", **JSON}
    # A name of its own: the PostgreSQL database is shared by the session's other tests.
    name = f"nonfinite-{uuid.uuid4().hex[:8]}"
    body = '{"name": "' + name + '", "recipe": "sae", "config": ' + config + "}"
    r = app_client.post("/api/v1/trainings", content=body, headers=auth)
    assert r.status_code == 422, r.text
    assert field in _fields(r.json())
    listed = app_client.get("/api/v1/trainings", params={"limit": 500}, headers=auth).json()
    assert name not in {t["name"] for t in listed["data"]}


@pytest.mark.parametrize(("path", "body", "field"), [
    ("/api/v1/trainings", '{"name": "n", "recipe": "mlp", "priority": NaN}', "priority"),
    ("/api/v1/system/gpus/recommend", '{"recipe": "mlp", "count": Infinity}', "count"),
    ("/api/v1/system/gpus/recommend", '{"recipe": "mlp", "config": {"weight_decay": NaN}}', "weight_decay"),
    ("/api/v1/system/gpus/validate", '{"gpu_ids": [0], "memory_mb": NaN}', "memory_mb"),
    ("/api/v1/trainings/batch", '{"items": [{"name": "a", "recipe": "mlp", "config": {"lr": -Infinity}}]}', "lr"),
])
def test_non_finite_numbers_anywhere_are_a_422_naming_the_field(
        app_client: TestClient, people: Any, path: str, body: str, field: str) -> None:
    r = app_client.post(path, content=body, headers={"Authorization": f"Bearer {people.admin}", **JSON})
    assert r.status_code == 422, r.text
    assert field in _fields(r.json())


def _numbers(node: Any, where: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every schema of type number under ``node``, with where it is."""
    found = []
    if isinstance(node, dict):
        kind = node.get("type")
        if kind == "number" or (isinstance(kind, list) and "number" in kind):
            found.append((where, node))
        for key, value in node.items():
            found += _numbers(value, f"{where}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _numbers(value, f"{where}/{i}")
    return found


def _bounded(schema: dict[str, Any]) -> bool:
    low = "minimum" in schema or "exclusiveMinimum" in schema
    high = "maximum" in schema or "exclusiveMaximum" in schema
    return low and high


def test_every_float_a_request_carries_has_finite_bounds_in_the_schema(app_client: TestClient) -> None:
    schema = app_client.get("/openapi.json").json()
    used: set[str] = set()
    todo: list[Any] = []
    for ops in schema["paths"].values():
        for op in ops.values():
            todo += [p.get("schema", {}) for p in op.get("parameters", [])]
            todo += [c.get("schema", {}) for c in op.get("requestBody", {}).get("content", {}).values()]
    inputs: list[Any] = []
    while todo:
        node = todo.pop()
        inputs.append(node)
        for ref in {v for v in json.dumps(node).split('"') if v.startswith("#/components/schemas/")}:
            name = ref.rsplit("/", 1)[1]
            if name not in used:
                used.add(name)
                todo.append(schema["components"]["schemas"][name])
    numbers = [n for node in inputs for n in _numbers(node)]
    assert numbers, "the request schemas carry floats (a recipe config's lr at least)"
    assert [where for where, n in numbers if not _bounded(n)] == []


def test_every_recipe_float_field_has_finite_bounds() -> None:
    for name in recipe_names():
        fields = get_recipe(name).config_cls.model_json_schema()["properties"]
        unbounded = [f for f, s in fields.items() for _, n in _numbers(s, f) if not _bounded(n)]
        assert unbounded == [], name
