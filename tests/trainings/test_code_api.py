"""POST /api/v1/code and script trainings over the API: permissions, archive checks, what is written."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import func, select, update

from support.people import bearer
from gpufleet.db.models import CodeBlob, Training, User
from gpufleet.db.session import session_scope
from gpufleet.trainings.archive import content_hash

from support.scripts import tar_of


def _project(marker: str = "") -> bytes:
    # A unique file per test: the PostgreSQL database is shared by the session.
    return tar_of([("file", "train.py", f"print('hi')  # {marker or uuid.uuid4().hex}\n")])


def _counts(settings) -> tuple[int, int]:
    with session_scope(settings) as sess:
        return (sess.scalar(select(func.count()).select_from(CodeBlob)) or 0,
                sess.scalar(select(func.count()).select_from(Training)) or 0)


def _upload(c, token: str, data: bytes, **params):
    return c.post("/api/v1/code", content=data, params=params,
                  headers={**bearer(token), "Content-Type": "application/octet-stream"})


def _script(c, token: str, code: str, **kw):
    body = {"name": "mine", "kind": "script", "code": code, "argv": ["python", "train.py", "--lr", "3e-4"], **kw}
    return c.post("/api/v1/trainings", json=body, headers=bearer(token))


def test_upload_is_content_addressed_and_stored_once(app_client, people, on_settings):
    data = _project()
    r = _upload(app_client, people.admin, data, sha256=content_hash(data))
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["hash"] == content_hash(data) and body["created"] is True and body["files"] == 1
    again = _upload(app_client, people.admin, data)
    assert again.status_code == 201 and again.json()["created"] is False
    assert app_client.get(f"/api/v1/code/{body['hash']}", headers=bearer(people.vic)).status_code == 200
    missing = app_client.get(f"/api/v1/code/{'0' * 64}", headers=bearer(people.vic))
    assert missing.status_code == 404 and "upload it" in missing.json()["detail"]
    with session_scope(on_settings) as sess:
        assert sess.scalar(select(func.count()).select_from(CodeBlob).where(CodeBlob.hash == body["hash"])) == 1


@pytest.mark.parametrize(
    ("entries", "status", "words"),
    [
        ([("file", "../../etc/cron.d/x", "boom")], 422, "'../../etc/cron.d/x'"),
        ([("file", "/abs.py", "x")], 422, "'/abs.py'"),
        ([("symlink", "data", "/home")], 422, "'data' is a symbolic link to '/home'"),
        # A chain of links, each inside on its own, climbs out once unpacked: refused at upload.
        ([("symlink", "a", "."), ("symlink", "a/b", "..")], 422, "'a/b' is a symbolic link to '..', which leaves"),
        ([("file", "w.bin", b"\x01" * 200_000)], 413, "65536"),
    ],
)
def test_unsafe_or_oversized_archives_are_refused_and_nothing_is_stored(app_client, people, on_settings,
                                                                         entries, status, words):
    import os

    data = tar_of([("file", "train.py", "x"), *entries])
    if status == 413:
        data = data + os.urandom(70_000)  # incompressible: over the 64 KiB test limit as sent
    before = _counts(on_settings)
    r = _upload(app_client, people.admin, data)
    assert r.status_code == status, r.text
    assert words in r.json()["detail"]
    assert _counts(on_settings) == before


def test_a_damaged_upload_is_refused(app_client, people, on_settings):
    data = _project()
    r = _upload(app_client, people.admin, data, sha256="f" * 64)
    assert r.status_code == 422 and "damaged" in r.json()["detail"]


def test_run_code_permission(app_client, people, on_settings):
    data = _project()
    code = _upload(app_client, people.admin, data).json()["hash"]
    before = _counts(on_settings)
    # A viewer reads only; a member needs run_code, for uploading and for submitting.
    r = _upload(app_client, people.vic, _project())
    assert r.status_code == 403 and "viewer" in r.json()["detail"]
    r = _upload(app_client, people.alice, _project())
    assert r.status_code == 403 and "run_code" in r.json()["detail"]
    r = _script(app_client, people.alice, code, memory="1GiB")
    assert r.status_code == 403 and "run_code" in r.json()["detail"]
    r = _script(app_client, people.vic, code, memory="1GiB")
    assert r.status_code == 403 and "viewer" in r.json()["detail"]
    assert _counts(on_settings) == before
    with session_scope(on_settings) as sess:
        sess.execute(update(User).where(User.name == people.names["alice"]).values(run_code=True))
    r = _script(app_client, people.alice, code, memory="1GiB", world_size=2)
    assert r.status_code == 201, r.text
    t = r.json()
    assert t["kind"] == "script" and t["code_hash"] == code and t["argv"] == ["python", "train.py", "--lr", "3e-4"]
    assert t["memory_declared"] == 2**30 and t["memory_estimate"] == 2**30 and t["world_size"] == 2
    assert t["estimate"]["source"] == "declared"
    listed = app_client.get("/api/v1/trainings", params={"owner": people.names["alice"]},
                            headers=bearer(people.vic)).json()["data"]
    assert [x["code_hash"] for x in listed] == [code] and listed[0]["kind"] == "script"


@pytest.mark.parametrize(
    ("extra", "field", "words"),
    [
        ({"env": {"GPUFLEET_DATABASE_URL": "x"}}, "env", "may not be set by a request"),
        ({"env": {"LD_PRELOAD": "/tmp/x.so"}}, "env", "may not be set by a request"),
        ({"memory": "lots"}, "memory", "is not a size"),
        ({"python": "py99"}, "python", "not configured"),
        ({"requirements": "../reqs.txt"}, "requirements", "must be a path inside the uploaded code"),
        ({"requirements": "requirements.txt"}, "requirements", "is not in the uploaded code"),
        ({"requirements": "setup.cfg"}, "requirements", "must be a requirements .txt file"),
        ({"requirements": "pyproject.toml"}, "requirements", "is not in the uploaded code"),
    ],
)
def test_bad_script_requests_say_what_to_fix_and_write_nothing(app_client, people, on_settings, extra, field, words):
    code = _upload(app_client, people.admin, _project()).json()["hash"]
    before = _counts(on_settings)
    r = _script(app_client, people.admin, code, **extra)
    assert r.status_code == 422, r.text
    assert words in r.json()["detail"]
    assert _counts(on_settings) == before


def test_unknown_code_and_allowed_env(app_client, people, on_settings):
    r = _script(app_client, people.admin, "a" * 64, memory="1GiB")
    assert r.status_code == 422 and "has not been uploaded" in r.json()["detail"]
    code = _upload(app_client, people.admin, _project()).json()["hash"]
    r = _script(app_client, people.admin, code, memory="512MiB", env={"OMP_NUM_THREADS": "2", "TRAIN_SEED": "1"})
    assert r.status_code == 201, r.text
    assert r.json()["env"] == {"OMP_NUM_THREADS": "2", "TRAIN_SEED": "1"}


def test_memory_comes_from_earlier_runs_of_the_same_code(app_client, people, on_settings):
    code = _upload(app_client, people.admin, _project()).json()["hash"]
    first = _script(app_client, people.admin, code, memory="1GiB").json()
    with session_scope(on_settings) as sess:
        sess.get(Training, uuid.UUID(first["id"])).measured_peak_memory = 300 * 2**20
    r = _script(app_client, people.admin, code)
    assert r.status_code == 201, r.text
    assert r.json()["memory_estimate"] == 300 * 2**20 and r.json()["estimate"]["source"] == "measured"
    assert r.json()["memory_declared"] is None


def test_no_memory_and_no_measured_peak_means_whole_gpus(app_client, people, on_settings):
    code = _upload(app_client, people.admin, _project()).json()["hash"]
    r = _script(app_client, people.admin, code, world_size=2)
    assert r.status_code == 201, r.text
    t = r.json()
    assert t["memory_estimate"] is None and t["estimate"]["source"] == "whole-gpu" and t["exclusive"] is True


def test_requirements_travel_with_the_training(app_client, people, on_settings):
    data = tar_of([("file", "train.py", f"print('hi')  # {uuid.uuid4().hex}\n"),
                   ("file", "requirements.txt", "tqdm\n")])
    code = _upload(app_client, people.admin, data).json()["hash"]
    r = _script(app_client, people.admin, code, requirements="./requirements.txt")
    assert r.status_code == 201, r.text
    assert r.json()["env"] == {"GPUFLEET_REQUIREMENTS": "requirements.txt"}
    r = app_client.post("/api/v1/trainings", json={"name": "r", "recipe": "mlp", "requirements": "requirements.txt"},
                        headers=bearer(people.admin))
    assert r.status_code == 422 and "belong to kind 'script'" in r.json()["detail"]


def test_recipe_trainings_still_need_a_recipe(app_client, people):
    r = app_client.post("/api/v1/trainings", json={"name": "x"}, headers=bearer(people.admin))
    assert r.status_code == 422 and "recipe" in r.text


def test_declared_memory_that_no_gpu_has_is_refused_at_once(app_client, people, on_settings):
    from gpufleet.telemetry.inventory import register_host

    s = on_settings.model_copy(update={"simulate": "2xH100-80GB", "host_name": f"h-{uuid.uuid4().hex[:8]}"})
    register_host(s)
    code = _upload(app_client, people.admin, _project()).json()["hash"]
    before = _counts(on_settings)
    r = _script(app_client, people.admin, code, memory="200GiB", gpu_ids=[0, 1], host=s.host_name)
    assert r.status_code == 422, r.text
    assert "can never be placed" in r.json()["detail"] and "200" in r.json()["detail"]
    assert _counts(on_settings) == before
    ok = _script(app_client, people.admin, code, memory="20GiB", gpu_ids=[0, 1], host=s.host_name)
    assert ok.status_code == 201, ok.text
    assert ok.json()["gpu_ids"] == [0, 1] and ok.json()["memory_estimate"] == 20 * 2**30


def test_a_scripts_request_is_held_to_what_its_kind_is(app_client, people, on_settings):
    """A script spans no hosts, starts only from a script's checkpoint, has no config to change on resume, and
    its resume needs the right to run code again: its kind's description says so (gpufleet.workkinds)."""
    with session_scope(on_settings) as sess:
        sess.execute(update(User).where(User.name == people.names["alice"]).values(run_code=True))
    code = _upload(app_client, people.alice, _project()).json()["hash"]
    recipe = app_client.post("/api/v1/trainings", headers=bearer(people.alice), json={
        "name": "r", "recipe": "mlp", "config": {"max_steps": 4, "global_batch_size": 16}})
    assert recipe.status_code == 201, recipe.text
    before = _counts(on_settings)
    r = _script(app_client, people.alice, code, hosts=2, gpus_per_host=1)
    assert r.status_code == 422 and r.json()["detail"] == ("a script training runs on one host; only recipe "
                                                           "trainings can span hosts")
    r = _script(app_client, people.alice, code, from_training=recipe.json()["id"])
    assert r.status_code == 422 and "is a recipe training of recipe mlp" in r.json()["detail"]
    assert _counts(on_settings) == before
    t = _script(app_client, people.alice, code, memory="1GiB").json()
    assert app_client.post(f"/api/v1/trainings/{t['id']}/cancel", headers=bearer(people.alice)).status_code == 200
    url = f"/api/v1/trainings/{t['id']}/resume"
    r = app_client.post(url, headers=bearer(people.alice), json={"config": {"max_steps": 8}})
    assert r.status_code == 422 and r.json()["detail"].startswith("a script training has no config to change")
    with session_scope(on_settings) as sess:
        sess.execute(update(User).where(User.name == people.names["alice"]).values(run_code=False))
    r = app_client.post(url, headers=bearer(people.alice))
    assert r.status_code == 403 and "run_code" in r.json()["detail"]
    with session_scope(on_settings) as sess:
        assert sess.get(Training, uuid.UUID(t["id"])).status == "cancelled"
