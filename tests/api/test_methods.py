"""A method a path does not serve: 405 with `Allow` naming exactly what the schema declares there."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient
from sqlalchemy import func, select

from gpufleet.config import Settings
from gpufleet.db.models import Training
from gpufleet.db.session import session_scope

METHODS = {"GET", "POST", "PUT", "PATCH", "DELETE"}


def test_every_path_answers_an_undeclared_method_with_405_and_its_full_allow(
        client: TestClient, sim_app_settings: Settings) -> None:
    paths = client.app.openapi()["paths"]
    # IDs that are UUIDs are UUIDs in the path itself (routed with the `uuid` convertor):
    # `/trainings/batch` is not `/trainings/{training_id}`, and `/sessions/1` is no session's path.
    uuid_params = {p["name"] for ops in paths.values() for op in ops.values() for p in op.get("parameters", [])
                   if p["in"] == "path" and p.get("schema", {}).get("format") == "uuid"}
    assert {"training_id", "session_id", "sweep_id"} <= uuid_params
    uuid_rx = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    a_uuid = "0" * 8 + "-0000-4000-8000-" + "0" * 12

    def pattern(t: str) -> str:
        for n in uuid_params:
            t = t.replace(re.escape("{" + n + "}"), uuid_rx)
        return re.sub(r"\\\{[^}]+\\\}", "[^/]+", t)

    def filled(t: str) -> str:
        for n in uuid_params:
            t = t.replace("{" + n + "}", a_uuid)
        return re.sub(r"\{[^}]+\}", "1", t)

    templates = {t: re.compile("^" + pattern(re.escape(t)) + "$") for t in paths}
    checked = 0
    for template in paths:
        # Path parameters filled with a value every parameter type accepts.
        path = filled(template)
        # A path is every template it matches.
        declared = {m.upper() for t, rx in templates.items() if rx.match(path) for m in paths[t]} & METHODS
        for method in sorted(METHODS - declared):
            r = client.request(method, path)
            assert r.status_code == 405, (method, path, r.status_code, r.text)
            allow = {m.strip() for m in r.headers["allow"].split(",")}
            assert allow - {"HEAD"} == declared, (method, path, allow, declared)
            assert "HEAD" not in allow or "GET" in allow
            checked += 1
    assert checked > 50
    with session_scope(sim_app_settings) as sess:
        assert sess.scalar(select(func.count()).select_from(Training)) == 0


def test_a_path_with_two_routes_lists_both(client: TestClient) -> None:
    r = client.put("/api/v1/trainings")
    assert r.status_code == 405
    assert r.headers["allow"] == "GET, POST"
    assert r.json() == {"detail": "Method Not Allowed"}
