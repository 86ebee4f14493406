"""The schema says what the server checks: strict types, enums, the Retry-After header, 405 for a fixed path.

Each case is one a schema-driven client or fuzzer met: a value the schema
refuses that the server took (``false`` as hours), a value it allows that the
server refused, or a header and a status it did not declare.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from gpufleet.engine.recipes import recipe_names

UUID = "00000000-0000-4000-8000-000000000000"


@pytest.mark.parametrize(("path", "body", "field"), [
    ("/api/v1/users/local/quota", {"gpu_hours_per_week": False}, "gpu_hours_per_week"),
    ("/api/v1/users/local/quota", {"share": "2"}, "share"),
    ("/api/v1/users/local/quota", {"max_gpus": True}, "max_gpus"),
])
def test_a_value_of_another_type_is_refused(client: TestClient, path: str, body: dict, field: str) -> None:
    r = client.put(path, json=body)
    assert r.status_code == 422, r.text
    assert field in str(r.json()["detail"])


def test_a_whole_number_written_as_a_float_is_an_integer(client: TestClient) -> None:
    # JSON Schema counts 2.0 an integer; so does the server.
    assert client.post("/api/v1/groups", json={"name": "team"}).status_code == 201
    r = client.put("/api/v1/groups/team/quota", json={"max_gpus": 2.0, "gpu_hours_per_week": 10})
    assert r.status_code == 200, r.text
    assert r.json()["quota"]["max_gpus"] == 2 and r.json()["quota"]["gpu_hours_per_week"] == 10.0
    assert client.post("/api/v1/trainings", json={"name": "n", "recipe": "mlp", "priority": 1.5}).status_code == 422
    ok = client.post("/api/v1/trainings", json={"name": "n", "recipe": "mlp", "priority": 1.0, "world_size": 1})
    assert ok.status_code == 201, ok.text


def test_get_on_the_batch_path_is_405_and_options_lists_what_the_schema_does(client: TestClient) -> None:
    r = client.get("/api/v1/trainings/batch")
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    spec = client.get("/openapi.json").json()["paths"]
    for template, ops in spec.items():
        path = template.replace("{training_id}", UUID).replace("{host}", "h").replace("{index}", "0")
        path = path.replace("{code_hash}", "0" * 64).replace("{name}", "g").replace("{member}", "m")
        path = path.replace("{session_id}", UUID).replace("{kind}", "user").replace("{sweep_id}", UUID)
        r = client.options(path)
        allow = {m.strip() for m in r.headers.get("allow", "").split(",") if m.strip()} - {"HEAD", "OPTIONS"}
        assert allow == {m.upper() for m in ops}, (template, r.status_code, allow)


def test_a_bad_query_value_is_a_422(client: TestClient) -> None:
    r = client.get("/api/v1/usage?from=2026-13-01")
    assert r.status_code == 422 and "from='2026-13-01' is not a day" in r.text
    assert client.get("/api/v1/trainings?status=sleeping").status_code == 422
    assert client.get("/api/v1/code/not-a-hash").status_code == 422


def test_the_schema_declares_enums_formats_and_retry_after(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]
    assert set(schemas["TrainingPublic"]["properties"]["status"]["enum"]) == {
        "queued", "scheduled", "running", "preempted", "succeeded", "failed", "cancelled", "reclaimed", "pruned"}
    recipe = schemas["TrainingCreate"]["properties"]["recipe"]["anyOf"][0]
    assert recipe["enum"] == recipe_names()
    [status] = [p for p in spec["paths"]["/api/v1/trainings"]["get"]["parameters"] if p["name"] == "status"]
    assert "enum" in str(status["schema"])
    [first] = [p for p in spec["paths"]["/api/v1/usage"]["get"]["parameters"] if p["name"] == "from"]
    assert first["schema"]["format"] == "date"
    assert spec["paths"]["/api/v1/code/{code_hash}"]["get"]["parameters"][0]["schema"]["pattern"]
    answered = 0
    for path, ops in spec["paths"].items():
        for op in ops.values():
            for code in ("429", "503"):
                if path.startswith("/api/") and code in op["responses"]:
                    assert "Retry-After" in op["responses"][code].get("headers", {}), (path, code)
                    answered += 1
    assert answered > 40
