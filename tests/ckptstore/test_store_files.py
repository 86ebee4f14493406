"""The Files page's listing and downloads include what the checkpoint store holds (``store/…``), for a
training whose checkpoints are on no folder this server sees; only a listed path is served."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from support.storekit import recipe_checkpoint, settings_for, tree
from support.fleet import make_settings
from support.s3server import S3Server

from gpufleet.ckptstore import upload_checkpoint
from gpufleet.commands.training_files import _newest_checkpoint
from gpufleet.config import Settings
from gpufleet.jobs import ckpt_uploads


@pytest.fixture
def server(s3: S3Server, bucket: str, tmp_path: Path) -> Iterator[Settings]:
    s = make_settings(tmp_path, "sqlite", **settings_for(s3, bucket, tmp_path).model_dump())
    assert ckpt_uploads.start(s, s) is not None
    yield s
    ckpt_uploads.stop()


def _client(settings: Settings) -> TestClient:
    """The trainings' and their files' routes, with the real auth dependencies (auth off: a local admin)."""
    from gpufleet.api.routes import training_files, trainings

    app = FastAPI()
    app.state.settings = settings
    app.include_router(trainings.router)
    app.include_router(training_files.router)
    return TestClient(app)


def test_the_files_listing_and_download_reach_the_store(server: Settings, tmp_path: Path) -> None:
    c = _client(server)
    r = c.post("/api/v1/trainings", json={"name": "stored", "recipe": "mlp", "config": {"max_steps": 5}})
    assert r.status_code == 201, r.text
    tid = r.json()["id"]
    elsewhere = tmp_path / "elsewhere" / tid  # a host whose folders this server never sees
    elsewhere.mkdir(parents=True)
    store = ckpt_uploads.current().store  # type: ignore[union-attr]
    for step in (10, 20):
        upload_checkpoint(store, tid, elsewhere, recipe_checkpoint(elsewhere, step))
    r = c.get(f"/api/v1/trainings/{tid}/files")
    assert r.status_code == 200, r.text
    listed = r.json()["data"]
    paths = {f["path"] for f in listed}
    assert {"store/step-20/model.bin", "store/step-20/optim/state.bin", "store/step-10/meta.json"} <= paths
    want = tree(elsewhere)
    got = c.get(f"/api/v1/trainings/{tid}/files/store/step-20/optim/state.bin")
    assert got.status_code == 200 and got.content == want["step-20/optim/state.bin"]
    # `trainings download ID` with no path: the newest checkpoint's files, from the store when no folder has one.
    assert sorted(_newest_checkpoint(listed)) == sorted(f"store/{p}" for p in want if p.startswith("step-20/"))
    for bad in ("store/step-20/nope.bin", "store/step-20", "store/step-20/optim"):
        assert c.get(f"/api/v1/trainings/{tid}/files/{bad}").status_code in (404, 422), bad
