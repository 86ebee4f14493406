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
    # A training's ID is a UUID in the path itself: `/trainings/batch` is not `/trainings/{training_id}`.
    uuid_rx = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    templates = {t: re.compile("^" + re.sub(r"\\{[^}]+\\}", "[^/]+",
                                            re.escape(t).replace(r"\{training_id\}", uuid_rx)) + "$")
                 for t in paths}
    checked = 0
    for template in paths:
        # Path parameters filled with a value every parameter type accepts.
        path = re.sub(r"\{[^}]+\}", "1", template.replace("{training_id}", "0" * 8 + "-0000-4000-8000-" + "0" * 12))
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
