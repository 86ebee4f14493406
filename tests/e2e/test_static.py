"""The dashboard is served at / with a fallback for client routes, never over the API."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi import APIRouter, FastAPI
from fastapi.testclient import TestClient

from gpufleet.api.static import install_static


def _app(settings, static_dir: Path) -> FastAPI:
    app = FastAPI()
    router = APIRouter(prefix="/api/v1")

    @router.get("/things")
    def things() -> dict:
        return {"data": []}

    @router.post("/submit")
    def submit() -> dict:
        return {"ok": True}

    app.include_router(router)
    install_static(app, settings, static_dir=static_dir)
    return app


@pytest.fixture
def built(tmp_path: Path) -> Path:
    root = tmp_path / "static"
    (root / "assets").mkdir(parents=True)
    (root / "index.html").write_text("<!doctype html><div id=root>dashboard</div>")
    (root / "assets" / "index-abc123.js").write_text("console.log('x')")
    (root / "favicon.svg").write_text("<svg/>")
    (tmp_path / "secret.txt").write_text("outside")
    return root


def test_serves_index_and_client_routes(settings, built: Path) -> None:
    client = TestClient(_app(settings, built))
    for path in ("/", "/trainings", "/trainings/5c1d/logs", "/history"):
        r = client.get(path)
        assert r.status_code == 200, path
        assert "dashboard" in r.text
        assert r.headers["cache-control"] == "no-cache"
    r = client.get("/assets/index-abc123.js")
    assert r.status_code == 200 and "console.log" in r.text
    assert "immutable" in r.headers["cache-control"]
    assert client.get("/favicon.svg").text == "<svg/>"
    assert client.get("/assets/missing.js").status_code == 404


def test_never_shadows_the_api(settings, built: Path) -> None:
    client = TestClient(_app(settings, built))
    assert client.get("/api/v1/things").json() == {"data": []}
    r = client.get("/api/v1/nope")
    assert r.status_code == 404 and r.json() == {"detail": "Not Found"}
    for path in ("/metrics", "/healthz", "/docs/x", "/openapi.json"):
        assert "dashboard" not in client.get(path).text, path
    # A GET on a POST-only API route is a 405, not the dashboard.
    r = client.get("/api/v1/submit")
    assert r.status_code == 405 and "POST" in r.headers["allow"]


def test_no_escape_from_the_build_folder(settings, built: Path) -> None:
    client = TestClient(_app(settings, built))
    r = client.get("/..%2Fsecret.txt")
    assert "outside" not in r.text


def test_unbuilt_dashboard_says_how_to_build(settings, tmp_path: Path) -> None:
    client = TestClient(_app(settings, tmp_path / "absent"))
    r = client.get("/")
    assert r.status_code == 200
    assert "scripts/build-frontend.sh" in r.text
    assert client.get("/api/v1/things").status_code == 200
