"""The OpenAPI contract as a client meets it: sign-in declared, and every code a route answers listed.

The route walk sends each operation of the product's app (sign-in on, a
simulated host registered) the requests clients really send: no credentials,
a bad token, each role, a missing or malformed or oversized body, a NUL
character, path parameters that name nothing or are not even of the right
type. Every status that comes back must be listed for that operation, with a
body of the listed error schema.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpufleet.api.app import create_app
from gpufleet.api.security.openapi import api_routes
from gpufleet.users.accounts import add_user
from gpufleet.users.tokens import create_token
from gpufleet.config import Settings
from gpufleet.db.session import session_scope, upgrade_database
from gpufleet.telemetry.inventory import register_host

SECRET = "contract-secret-" + "z" * 40
OPEN = {("post", "/api/v1/auth/sign-in"), ("get", "/api/v1/auth/link"), ("post", "/api/v1/auth/sign-out"),
        ("get", "/healthz"),
        # A calendar app's poll: its secret feed token in the address is its only credential (docs/security.md).
        ("get", "/api/v1/bookings.ics")}


@pytest.fixture
def walk(sim_settings: Settings) -> Iterator[tuple[TestClient, dict[str, str], Settings]]:
    settings = sim_settings.model_copy(update={"auth": "on", "secret_key": SECRET, "create_rate_per_minute": 10000})
    upgrade_database(settings)
    register_host(settings)
    tokens = {}
    with session_scope(settings) as sess:
        for role in ("admin", "member", "viewer"):
            add_user(sess, f"walk-{role}", role)
            tokens[role] = create_token(sess, f"walk-{role}").secret
    with TestClient(create_app(settings)) as c:
        yield c, tokens, settings


def _spec_ops(spec: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            yield method, path, op


def test_sign_in_is_declared_on_every_protected_operation_and_no_open_one(walk) -> None:
    client, _tokens, _settings = walk
    spec = client.get("/openapi.json").json()
    schemes = spec["components"]["securitySchemes"]
    assert schemes["bearerAuth"] == {**schemes["bearerAuth"], "type": "http", "scheme": "bearer"}
    assert schemes["sessionCookie"]["in"] == "cookie" and schemes["sessionCookie"]["name"] == "gpufleet_session"
    for method, path, op in _spec_ops(spec):
        if (method, path) in OPEN:
            assert "security" not in op, (method, path)
        else:
            # Sign-in is required here: no anonymous ({}) alternative.
            assert op["security"] == [{"bearerAuth": []}, {"sessionCookie": []}], (method, path)
            # And the gate really refuses it without credentials.
    for method, path, _op in _spec_ops(spec):
        if (method, path) not in OPEN and "{" not in path:
            assert client.request(method, path).status_code == 401, (method, path)


def test_with_sign_in_off_the_schema_says_credentials_are_optional(tmp_path) -> None:
    from gpufleet.config import load_settings

    s = load_settings(data_dir=tmp_path / "d", auth="off")
    spec = create_app(s).openapi()
    op = spec["paths"]["/api/v1/trainings"]["get"]
    assert op["security"] == [{"bearerAuth": []}, {"sessionCookie": []}, {}]


def _valid_bodies(settings: Settings, admin: str) -> dict[tuple[str, str], Any]:
    return {
        ("post", "/api/v1/trainings"): {"name": "walk", "recipe": "mlp", "config": {"max_steps": 1}},
        ("post", "/api/v1/trainings/batch"): {"items": [{"name": "walk-b", "recipe": "mlp", "config": {}}]},
        ("post", "/api/v1/system/gpus/recommend"): {"recipe": "mlp", "config": {}},
        ("post", "/api/v1/system/gpus/validate"): {"gpu_ids": [0], "memory_mb": 100},
        ("post", "/api/v1/sessions"): {"gpus": 1, "hours": 1},
        ("post", "/api/v1/sessions/{session_id}/extend"): {"hours": 1},
        ("put", "/api/v1/sessions/limits/{kind}/{name}"): {"max_hours": 4},
        ("post", "/api/v1/system/gpus/{host}/{index}/drain"): {"reason": "walk"},
        ("post", "/api/v1/auth/sign-in"): {"token": admin},
        ("post", "/api/v1/webhooks"): {"url": "https://hooks.example.org/walk"},
        ("post", "/api/v1/bookings"): {"gpus": 1, "start": "2099-01-01T10:00", "hours": 1},
        ("post", "/api/v1/users"): {"name": "walk-new", "role": "viewer"},
        ("patch", "/api/v1/users/{name}"): {"role": "viewer"},
        ("post", "/api/v1/tokens"): {"user": "walk-viewer", "name": "walk"},
        ("post", "/api/v1/sweeps"): {"name": "walk-s", "recipe": "mlp", "config": {"max_steps": 1},
                                     "space": {"lr": [0.1]}},
    }


def _path_variants(path: str, settings: Settings, training: str) -> list[str]:
    good = {"training_id": training, "host": settings.host_name, "index": "0", "code_hash": "0" * 64,
            "name": "walk-group", "member": "walk-member", "path": "checkpoints/step-1.pt",
            "hook_id": str(uuid.uuid4()), "session_id": training, "kind": "group", "sweep_id": str(uuid.uuid4()),
            "token_id": str(uuid.uuid4()), "booking_id": str(uuid.uuid4())}
    bad = [{"training_id": str(uuid.uuid4())}, {"training_id": "not-a-uuid"}, {"host": "nope"},
           {"index": "99"}, {"index": "x"}, {"code_hash": "not-a-hash"}, {"path": "checkpoints/%2E%2E/x"},
           {"hook_id": "not-a-uuid"}, {"session_id": "not-a-uuid"}, {"kind": "team"}, {"sweep_id": "not-a-uuid"},
           {"token_id": "not-a-uuid"}, {"booking_id": "not-a-uuid"}]
    out = [path.format(**good)] if "{" in path else [path]
    for b in bad:
        if any("{" + k + "}" in path for k in b):
            out.append(path.format(**{**good, **b}))
    return out


def test_every_code_a_route_returns_is_listed_with_its_error_schema(walk) -> None:
    client, tokens, settings = walk
    spec = client.get("/openapi.json").json()
    member = {"Authorization": f"Bearer {tokens['member']}"}
    training = client.post("/api/v1/trainings", headers=member,
                           json={"name": "walk-t", "recipe": "mlp", "config": {"max_steps": 1}}).json()["id"]
    bodies = _valid_bodies(settings, tokens["admin"])
    creds: dict[str, dict[str, str]] = {
        "none": {}, "bad token": {"Authorization": "Bearer gf_not_a_token"},
        **{role: {"Authorization": f"Bearer {t}"} for role, t in tokens.items()},
    }
    too_big = b'{"x": "' + b"a" * (settings.max_request_bytes + 10) + b'"}'
    # A path parameter's convertor ({path:path}) is not part of the documented path.
    routes = {(m.lower(), path.replace(":path}", "}")) for r, path in api_routes(client.app) if r.include_in_schema
              for m in r.methods}
    assert routes == {(m, p) for m, p, _ in _spec_ops(spec)}  # the walk covers every route
    unlisted: list[str] = []
    bad_bodies: list[str] = []
    sent = 0
    for method, path, op in _spec_ops(spec):
        listed = set(op["responses"])
        variants: list[dict[str, Any]] = [{}]
        if "requestBody" in op:
            variants += [{"content": b"{not json", "headers": {"Content-Type": "application/json"}},
                         {"content": b"\xff\xfe{", "headers": {"Content-Type": "application/json"}},
                         {"json": {}}, {"content": too_big, "headers": {"Content-Type": "application/json"}},
                         {"json": {"name": "a\u0000b"}}]
            if (method, path) in bodies:
                variants += [{"json": bodies[(method, path)]}, {"json": {**bodies[(method, path)], "host": "nope"}}]
        variants += [{"params": {"host": "a\u0000b"}}, {"params": {"host": "nope"}},
                     {"headers": {"host": "evil.example"}}]
        if "requestBody" not in op:  # the size limit answers before the route, body or not
            variants.append({"content": too_big, "headers": {"Content-Type": "application/json"}})
        if any(p["in"] == "query" for p in op.get("parameters", [])):
            first = next(p["name"] for p in op["parameters"] if p["in"] == "query")
            variants.append({"params": {first: "not-valid-" * 3}})
        for url in _path_variants(path, settings, training):
            for who, headers in creds.items():
                for v in variants:
                    kw = dict(v)
                    kw["headers"] = {**headers, **kw.get("headers", {})}
                    r = client.request(method, url, **kw)
                    sent += 1
                    where = f"{method.upper()} {url} as {who} with {sorted(v)}"
                    if str(r.status_code) not in listed:
                        unlisted.append(f"{where}: {r.status_code} {r.text[:120]}")
                    if r.status_code >= 400 and not isinstance(r.json().get("detail"), (str, list)):
                        bad_bodies.append(f"{where}: {r.status_code} {r.text[:120]}")
    assert sent > 500
    # No read lists a 403 it cannot answer: no GET has a role check, and the cross-site rule spares reads;
    # a training's files, events and logs are the reads kept to its owner and admins (events and logs by
    # default: GPUFLEET_TRAINING_VISIBILITY=owner).
    owners = ("/api/v1/trainings/{training_id}/files", "/api/v1/trainings/{training_id}/events",
              "/api/v1/trainings/{training_id}/logs")
    assert not [p for m, p, op in _spec_ops(spec) if m == "get" and "403" in op["responses"]
                and not p.startswith(owners)]
    assert not unlisted, "codes returned but not listed:\n" + "\n".join(sorted(set(unlisted))[:60])
    assert not bad_bodies, "error bodies without a detail:\n" + "\n".join(bad_bodies[:30])


def test_bad_json_is_a_422_unreadable_bytes_a_400_and_both_are_listed_only_with_a_body(walk) -> None:
    client, tokens, _settings = walk
    headers = {"Authorization": f"Bearer {tokens['member']}", "Content-Type": "application/json"}
    r = client.post("/api/v1/trainings", content=b"{", headers=headers)
    assert r.status_code == 422 and r.json()["detail"][0]["type"] == "json_invalid"
    r = client.post("/api/v1/trainings", content=b"\xff\xfe{", headers=headers)
    assert r.status_code == 400 and isinstance(r.json()["detail"], str)
    spec = client.get("/openapi.json").json()
    # Every operation can meet the Host guard's 400; only one with a body can meet unreadable bytes.
    assert all("400" in op["responses"] for _m, _p, op in _spec_ops(spec))
    assert all(("UTF-8" in op["responses"]["400"]["description"]) == ("requestBody" in op)
               for _m, _p, op in _spec_ops(spec))
    cancel = spec["paths"]["/api/v1/trainings/{training_id}/cancel"]["post"]["responses"]
    assert cancel["409"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ErrorDetail"}


def test_a_method_the_path_does_not_have_is_a_405_with_an_error_detail(walk) -> None:
    """No operation answers 405 (it is about a method the schema does not list); its body is still ErrorDetail."""
    client, tokens, _settings = walk
    r = client.delete("/api/v1/trainings", headers={"Authorization": f"Bearer {tokens['admin']}"})
    assert r.status_code == 405 and r.headers["allow"] and r.json() == {"detail": "Method Not Allowed"}


def test_recommends_exclusive_parameters_are_described_as_such(walk) -> None:
    client, tokens, _settings = walk
    op = client.get("/openapi.json").json()["paths"]["/api/v1/system/gpus/recommend"]["get"]
    params = {p["name"]: p for p in op["parameters"]}
    for name in ("memory_mb", "recipe"):
        assert "exactly one of" in params[name]["description"] and params[name]["schema"]["examples"], name
    assert "only with `recipe`" in params["config"]["description"] and params["config"]["schema"]["examples"]
    assert "Both or neither is a 422" in op["description"]
    # And the server keeps the rule the schema states.
    viewer = {"Authorization": f"Bearer {tokens['viewer']}"}
    for query in ({}, {"memory_mb": 10, "recipe": "mlp"}, {"memory_mb": 10, "config": "{}"}):
        assert client.get("/api/v1/system/gpus/recommend", params=query, headers=viewer).status_code == 422, query
    assert client.get("/api/v1/system/gpus/recommend", params={"memory_mb": 10}, headers=viewer).status_code == 200
