"""A training's files and its resume through the API, behind real sign-in: owner, admin, another member.

Trainings are created through the API and stay queued (no worker here); their
files are put where a launcher writes them. The real-worker paths are in
tests/trainings/test_script_stops.py.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpufleet.config import Settings
from gpufleet.db.session import upgrade_database
from gpufleet.telemetry.inventory import register_host
from gpufleet.trainings.files import checkpoint_dir, output_dir
from support.people import SECRET

TINY = {"max_steps": 4, "global_batch_size": 16, "checkpoint_every": 2, "log_every": 1}


@pytest.fixture
def on_settings(sim_settings: Settings) -> Settings:
    """Sign-in on, on the simulated host (``people`` and ``app_client`` come from tests/conftest.py)."""
    s = sim_settings.model_copy(update={"auth": "on", "secret_key": SECRET})
    upgrade_database(s)
    register_host(s)
    return s


def _as(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _create(app_client: TestClient, token: str, **extra) -> dict:
    r = app_client.post("/api/v1/trainings", headers=_as(token),
                        json={"name": "t", "recipe": "mlp", "config": TINY, "gpu_ids": [0], **extra})
    assert r.status_code == 201, r.text
    return r.json()


def test_owner_lists_and_downloads_whole_and_ranges_another_member_gets_403(app_client, on_settings, people):
    t = _create(app_client, people.alice)
    ckpt = checkpoint_dir(on_settings, t["id"])
    (ckpt / "step-000002").mkdir(parents=True)
    payload = os.urandom(5000)
    (ckpt / "step-000002" / "model.pt").write_bytes(payload)
    (ckpt / "fence.json").write_text('{"attempt": 1}')
    out = output_dir(on_settings, t["id"])
    out.mkdir(parents=True)
    (out / "samples.txt").write_text("hello")
    base = f"/api/v1/trainings/{t['id']}/files"

    listed = app_client.get(base, headers=_as(people.alice))
    assert listed.status_code == 200, listed.text
    assert [(f["path"], f["size"]) for f in listed.json()["data"]] == [
        ("checkpoints/step-000002/model.pt", 5000), ("outputs/samples.txt", 5)]  # never gpufleet's fence.json
    whole = app_client.get(f"{base}/checkpoints/step-000002/model.pt", headers=_as(people.alice))
    assert whole.status_code == 200 and whole.content == payload
    assert whole.headers["accept-ranges"] == "bytes"
    part = app_client.get(f"{base}/checkpoints/step-000002/model.pt",
                      headers={**_as(people.alice), "Range": "bytes=100-1099"})
    assert part.status_code == 206 and part.content == payload[100:1100]
    assert part.headers["content-range"] == "bytes 100-1099/5000"
    assert app_client.get(f"{base}/outputs/samples.txt", headers=_as(people.admin)).content == b"hello"

    for url in (base, f"{base}/checkpoints/step-000002/model.pt"):
        r = app_client.get(url, headers=_as(people.bob))
        assert r.status_code == 403 and "only its owner and admins" in r.json()["detail"], r.text


def test_paths_stay_inside_the_training_files(app_client, on_settings, people, tmp_path):
    t = _create(app_client, people.alice)
    ckpt = checkpoint_dir(on_settings, t["id"])
    ckpt.mkdir(parents=True)
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours")
    (ckpt / "escape.pt").symlink_to(secret)
    (ckpt / "fence.json").write_text("{}")
    base = f"/api/v1/trainings/{t['id']}/files"
    assert app_client.get(base, headers=_as(people.alice)).json()["data"] == []  # the link is not listed
    for path, status in (("checkpoints/escape.pt", 422), ("checkpoints/%2E%2E/%2E%2E/x", 422),
                         ("etc/passwd", 422), ("checkpoints/fence.json", 404), ("checkpoints/none.pt", 404)):
        r = app_client.get(f"{base}/{path}", headers=_as(people.alice))
        assert r.status_code == status, (path, r.status_code, r.text)


def test_resume_puts_an_ended_training_back_in_the_queue_for_its_owner_only(app_client, people):
    t = _create(app_client, people.alice)
    url = f"/api/v1/trainings/{t['id']}/resume"
    r = app_client.post(url, headers=_as(people.alice))
    assert r.status_code == 409 and "only an ended training" in r.json()["detail"]
    cancelled = app_client.post(f"/api/v1/trainings/{t['id']}/cancel", headers=_as(people.alice))
    assert cancelled.json()["status"] == "cancelled"
    assert app_client.post(url, headers=_as(people.bob)).status_code == 403
    bad = app_client.post(url, headers=_as(people.alice), json={"config": {"max_steps": 0}})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "config", "max_steps"]
    r = app_client.post(url, headers=_as(people.alice), json={"config": {"max_steps": 8}})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["id"] == t["id"] and body["status"] == "queued" and body["max_steps"] == 8
    assert body["restarts"] == 0 and body["finished_at"] is None
    events = app_client.get(f"/api/v1/trainings/{t['id']}/events", headers=_as(people.alice)).json()["data"]
    assert events[-1]["status"] == "queued" and events[-1]["reason"].startswith(f"resumed by {people.names['alice']}")


def test_from_training_links_a_new_training_to_a_source_of_its_own_kind(app_client, people):
    src = _create(app_client, people.alice)
    clone = _create(app_client, people.alice, from_training=src["id"], config={**TINY, "max_steps": 10})
    assert clone["resumed_from"] == src["id"] and clone["id"] != src["id"]
    r = app_client.post("/api/v1/trainings", headers=_as(people.bob),
                    json={"name": "x", "recipe": "mlp", "config": TINY, "gpu_ids": [0], "from_training": src["id"]})
    assert r.status_code == 403 and "only its owner and admins" in r.text
    r = app_client.post("/api/v1/trainings", headers=_as(people.alice),
                    json={"name": "x", "recipe": "sae", "config": TINY, "gpu_ids": [0], "from_training": src["id"]})
    assert r.status_code == 422 and "of recipe mlp" in r.text
    r = app_client.post("/api/v1/trainings", headers=_as(people.alice), json={
        "name": "x", "recipe": "mlp", "config": TINY, "gpu_ids": [0], "from_training": str(uuid.uuid4())})
    assert r.status_code == 422 and "does not exist" in r.text


def test_a_clone_first_attempt_starts_from_a_copy_of_the_newest_checkpoint(tmp_path):
    from gpufleet.engine.resumepoint import newest_resume_point, seed_from

    src, dst = tmp_path / "src", tmp_path / "dst"
    (src / "step-4").mkdir(parents=True)
    (src / "step-4" / "meta.json").write_text("{}")
    (src / "step-4" / "model.pt").write_bytes(b"w")
    (src / "fence.json").write_text("{}")
    assert seed_from(src, dst) == "step-4"
    assert Path(newest_resume_point(dst)).name == "step-4" and (dst / "step-4" / "model.pt").read_bytes() == b"w"
    assert seed_from(src, dst) is None  # it has its own now
    only_fence = tmp_path / "fenced"
    only_fence.mkdir()
    (only_fence / "fence.json").write_text("{}")
    assert newest_resume_point(only_fence) == ""  # gpufleet's own file is never a resume point


def test_a_folder_swapped_for_a_link_after_the_check_serves_nothing_outside(app_client, on_settings, people,
                                                                            tmp_path, monkeypatch):
    # The training's code owns its folders and may swap one for a link between the server's check and its read.
    from gpufleet.trainings import files

    t = _create(app_client, people.alice)
    ckpt = checkpoint_dir(on_settings, t["id"])
    (ckpt / "sub").mkdir(parents=True)
    (ckpt / "sub" / "secret_key").write_text("mine")
    closed = tmp_path / "secrets"
    closed.mkdir()
    (closed / "secret_key").write_text("the server's")
    checked = files.named

    def check_then_swap(*args):
        real = checked(*args)
        (ckpt / "sub" / "secret_key").unlink()
        (ckpt / "sub").rmdir()
        (ckpt / "sub").symlink_to(closed)
        return real

    monkeypatch.setattr(files, "named", check_then_swap)
    r = app_client.get(f"/api/v1/trainings/{t['id']}/files/checkpoints/sub/secret_key", headers=_as(people.alice))
    assert r.status_code in (404, 422) and b"the server's" not in r.content, (r.status_code, r.content)


def test_a_pool_trainings_files_are_its_folder_on_the_pool_and_a_link_there_serves_nothing(
        app_client, on_settings, people, tmp_path):
    """A Slurm pool's training keeps its checkpoints and outputs under the pool's root, in folders its owner's
    account owns: they are listed and served from there, and one swapped for a link serves nothing."""
    from sqlalchemy import update

    from gpufleet.db.pools import Pool
    from gpufleet.db.session import write_session
    from gpufleet.lifecycle.models import Training

    t = _create(app_client, people.alice)
    root = tmp_path / "pool-root"
    with write_session(on_settings) as sess:
        sess.add(Pool(name="cluster", options={"partition": "gpu"}, checkpoint_root=str(root),
                      python="/usr/bin/python3"))
        sess.execute(update(Training).where(Training.id == uuid.UUID(t["id"])).values(pool="cluster"))
    home = root / t["id"]
    (home / "checkpoints").mkdir(parents=True)
    (home / "checkpoints" / "step-3.pt").write_bytes(b"ckpt")
    (home / "output").mkdir()
    (home / "output" / "samples.txt").write_text("hello")
    (home / "slurm-1.out").write_text("the job's output is the log, not a file of the training's")
    base = f"/api/v1/trainings/{t['id']}/files"
    listed = app_client.get(base, headers=_as(people.alice)).json()["data"]
    assert [(f["path"], f["size"]) for f in listed] == [("checkpoints/step-3.pt", 4), ("outputs/samples.txt", 5)]
    assert app_client.get(f"{base}/checkpoints/step-3.pt", headers=_as(people.alice)).content == b"ckpt"
    assert app_client.get(f"{base}/outputs/samples.txt", headers=_as(people.alice)).content == b"hello"
    assert app_client.get(base, headers=_as(people.bob)).status_code == 403

    # The member owns home/: swapping checkpoints/ for a link to another's folder shows and serves nothing of it.
    other = tmp_path / "someone-elses"
    other.mkdir()
    (other / "step-3.pt").write_bytes(b"not yours")
    (home / "checkpoints" / "step-3.pt").unlink()
    (home / "checkpoints").rmdir()
    (home / "checkpoints").symlink_to(other)
    listed = app_client.get(base, headers=_as(people.alice)).json()["data"]
    assert [f["path"] for f in listed] == ["outputs/samples.txt"]
    r = app_client.get(f"{base}/checkpoints/step-3.pt", headers=_as(people.alice))
    assert r.status_code in (404, 422) and b"not yours" not in r.content, (r.status_code, r.content)


def test_by_default_a_trainings_logs_and_events_are_its_owners_and_the_admins(app_client, people):
    # Logs often hold what a script printed, secrets included: another member sees the training, not its contents.
    t = _create(app_client, people.alice)
    for path in ("logs", "events"):
        url = f"/api/v1/trainings/{t['id']}/{path}"
        refused = app_client.get(url, headers=_as(people.bob))
        assert refused.status_code == 403 and "GPUFLEET_TRAINING_VISIBILITY" in refused.text, (path, refused.text)
        assert app_client.get(url, headers=_as(people.vic)).status_code == 403
        assert app_client.get(url, headers=_as(people.alice)).status_code == 200
        assert app_client.get(url, headers=_as(people.admin)).status_code == 200
    listed = app_client.get("/api/v1/trainings", headers=_as(people.bob)).json()
    assert t["id"] in [x["id"] for x in listed["data"]]  # that it exists, and whose it is, stays visible
