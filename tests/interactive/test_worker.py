"""Sessions on a real worker: the owner's account, the queue's quota, and a stop handing the GPU on.

The product's app with sign-in on, the scheduler loop and a real Celery
worker (run as root, as in production: it switches to each owner's Unix
account and sandboxes the session) on a simulated fleet, PostgreSQL + Redis.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from support.fleet import TINY_SAE, make_settings, register, unique, wait_for
from sqlalchemy import select
from support.unix import need_root, short_name, unix_account

from gpufleet.api.app import create_app
from gpufleet.db.models import Training
from gpufleet.db.session import session_scope
from gpufleet.users.accounts import add_user, set_permission
from gpufleet.users.tokens import create_token
from support.people import SECRET, bearer

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]
LONG = dict(TINY_SAE, max_steps=1_000_000, checkpoint_every=1_000_000)


@pytest.fixture
def open_root() -> Iterator[Path]:
    """A data dir every account may enter (pytest's tmp dir is root's alone)."""
    root = Path(tempfile.mkdtemp(prefix="gpufleet-sess-", dir="/tmp"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _h(token: str) -> dict[str, str]:
    return bearer(token) if token else {}  # no token: single-user mode's local admin


def session(c: TestClient, token: str, sid: str) -> dict:
    r = c.get(f"/api/v1/sessions/{sid}", headers=_h(token))
    assert r.status_code == 200, r.text
    return r.json()


def wait_session(c: TestClient, token: str, sid: str, statuses: tuple[str, ...], timeout: float = 180) -> dict:
    return wait_for(lambda: (b := session(c, token, sid))["status"] in statuses and b, timeout,
                    f"session {sid} in {statuses}", 0.3)


def events(c: TestClient, token: str, tid: str) -> list[dict]:
    return c.get(f"/api/v1/trainings/{tid}/events", headers=_h(token)).json()["data"]


def _proc(pid: int) -> tuple[list[str], int, str]:
    base = Path(f"/proc/{pid}")
    argv = base.joinpath("cmdline").read_bytes().decode(errors="replace").split("\0")
    uid = int(next(x for x in base.joinpath("status").read_text().splitlines() if x.startswith("Uid:")).split()[1])
    return argv, uid, base.joinpath("environ").read_bytes().decode(errors="replace")


def holder_process(settings, sid: str) -> tuple[list[str], int, str] | None:
    """The session's holder (``sleep infinity``) among its launcher's process group."""
    from gpufleet.jobs.procs import group_members

    with session_scope(settings) as sess:
        pgid = sess.scalar(select(Training.launcher_pid).where(Training.id == sid))
    for pid in group_members(pgid) if pgid else []:
        try:
            argv, uid, environ = _proc(pid)
        except (OSError, StopIteration):
            continue
        if argv[:2] == ["sleep", "infinity"]:
            return argv, uid, environ
    return None


def test_a_shell_session_runs_as_its_owner_waits_for_quota_and_its_stop_hands_the_gpu_on(
        open_root, tmp_path, request, workers, scheduler):
    need_root()
    settings = make_settings(tmp_path, "postgresql", request, simulate="2xH100-80GB", auth="on", secret_key=SECRET,
                             data_dir=open_root / "data", checkpoint_root=str(open_root / "ckpt"))
    register(settings)
    name, admin = short_name("gfs"), unique("root")
    with unix_account(name) as account:
        with session_scope(settings) as sess:
            add_user(sess, name)
            add_user(sess, admin, "admin")
            set_permission(sess, name, "run_code", True)
            set_permission(sess, name, "non_preemptible", True)
            tok, root = create_token(sess, name).secret, create_token(sess, admin).secret
            sess.commit()
        w = workers(settings)
        scheduler(settings)
        c = TestClient(create_app(settings))
        assert c.put(f"/api/v1/users/{name}/quota", headers=bearer(root), json={"max_gpus": 1}).status_code == 200
        started = []

        def start(**body) -> str:
            r = c.post("/api/v1/sessions", json=body, headers=bearer(tok))
            assert r.status_code == 201, r.text
            started.append(r.json()["id"])
            return r.json()["id"]

        try:
            a = start(gpus=1, hours=1)
            body = wait_session(c, tok, a, ("running", "failed", "stopped"))
            assert body["status"] == "running", (body, w.output())
            # Its process runs as the owner's account, sees only its GPU and knows its session.
            argv, uid, environ = wait_for(lambda: holder_process(settings, a), 60, "the session's process")
            assert uid == account.pw_uid
            assert f"GPUFLEET_SESSION_ID={a}" in environ
            assert f"CUDA_VISIBLE_DEVICES={body['gpu_ids'][0]}\0" in environ
            # A second session is over the owner's one-GPU quota: it waits and says why.
            b = start(gpus=1, hours=1)
            waiting = wait_for(lambda: (s := session(c, tok, b))["wait_reason"] and s, 60, "a wait reason")
            assert waiting["status"] == "queued"
            assert waiting["wait_reason"].startswith(f"{name} holds 1 of 1 GPUs in their quota"), waiting
            # Stopping the first frees its GPU: the queued session takes it.
            r = c.post(f"/api/v1/sessions/{a}/stop", headers=bearer(tok))
            assert r.status_code == 200 and r.json()["status"] in ("stopping", "stopped"), r.text
            ended = wait_session(c, tok, a, ("stopped", "failed"))
            assert (ended["status"], ended["end_reason"]) == ("stopped", "user"), ended
            wait_session(c, tok, b, ("running",))
            # A training queued behind the second session starts once that one is stopped.
            r = c.post("/api/v1/trainings", headers=bearer(tok), json={"name": "after", "recipe": "sae",
                                                                      "config": LONG, "preemptible": False})
            assert r.status_code == 201, r.text
            t = r.json()["id"]
            started.append(t)
            wait_for(lambda: c.get(f"/api/v1/trainings/{t}", headers=bearer(tok)).json()["wait_reason"], 60,
                     "the training to wait")
            assert c.post(f"/api/v1/sessions/{b}/stop", headers=bearer(tok)).status_code == 200
            wait_for(lambda: c.get(f"/api/v1/trainings/{t}", headers=bearer(tok)).json()["status"] == "running",
                     180, "the training to take the freed GPU")
            kinds = [e["kind"] for e in events(c, tok, a)]
            assert "session_ready" in kinds and kinds.count("session_stopped") <= 1
            stopped = wait_for(lambda: [e for e in events(c, tok, a) if e["kind"] == "session_stopped"], 30,
                               "the session_stopped event")
            assert stopped[0]["data"]["reason"] == "user" and stopped[0]["user"] == name
        finally:
            for sid in started:
                c.post(f"/api/v1/trainings/{sid}/cancel", headers=bearer(root))
            for sid in started:
                wait_for(lambda sid=sid: c.get(f"/api/v1/trainings/{sid}", headers=bearer(root)).json()["status"]
                         in ("cancelled", "failed", "succeeded"), 120, "the end")
