"""A second kind of place costs one class: a kind this file registers runs a training from the REST request to
``succeeded`` through the same interface the Slurm kind implements (gpufleet.pools.place).

The kind (tests/support/localplace.py) runs each job as a subprocess of this machine, as the member's own Unix
account, through gpufleet.pools.node's ``env`` side; everything between the request and the job (the route,
the one placement, the pool's check, the pools' loop, the attempt's folder and spec, the watch that carries
the job's state, output and progress back, the accounting) is the product's, on real PostgreSQL.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from gpufleet.api.app import create_app
from gpufleet.db.pools import PoolJob
from gpufleet.db.session import session_scope, write_session
from gpufleet.jobs import pool_loop as loop, pool_watch as watch
from gpufleet.jobs.logs import log_path
from gpufleet.lifecycle.models import Training, TrainingEvent, TrainingMetric
from gpufleet.pools import kinds, service
from gpufleet.users.accounts import add_user
from gpufleet.users.tokens import create_token
from support.fleet import make_settings, wait_for
from support.localplace import NODE, LocalPlace
from support.people import SECRET, bearer
from support.unix import short_name, unix_account

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

TINY = {"max_steps": 6, "global_batch_size": 8, "checkpoint_every": 3, "synthetic_samples": 64}


@pytest.fixture
def place():
    kind = kinds.register(LocalPlace())
    try:
        yield kind
    finally:
        kind.close()
        kinds.unregister(kind.name)


@pytest.fixture
def settings(tmp_path: Path, request, place):
    s = make_settings(tmp_path, "postgresql", request, auth="on", secret_key=SECRET)
    root = Path(tempfile.mkdtemp(prefix="gpufleet-place-"))
    root.chmod(0o755)
    with write_session(s) as sess:
        service.add(sess, s, service.PoolSpec(name="here", kind=place.name, options={"slots": 2},
                                              gpus_per_node=2, checkpoint_root=str(root)))
    return s


@pytest.fixture
def member(settings):
    name = short_name("lp")
    with unix_account(name) as entry:
        with write_session(settings) as sess:
            add_user(sess, name, "member")
            token = create_token(sess, name).secret
        yield entry, token


def _row(settings, tid: uuid.UUID) -> Training:
    with session_scope(settings) as sess:
        t = sess.get(Training, tid)
        sess.expunge(t)
        return t


def _events(settings, tid: uuid.UUID) -> list[str]:
    with session_scope(settings) as sess:
        return [e.reason or "" for e in sess.scalars(select(TrainingEvent).where(
            TrainingEvent.training_id == tid).order_by(TrainingEvent.seq))]


def test_a_kind_registered_here_runs_a_training_from_the_rest_request_to_succeeded(settings, member, place) -> None:
    entry, token = member
    with TestClient(create_app(settings)) as api:
        made = api.post("/api/v1/trainings", headers=bearer(token),
                        json={"name": "on-local", "recipe": "mlp", "config": TINY, "world_size": 1, "pool": "here"})
        assert made.status_code == 201, made.text
        tid = uuid.UUID(made.json()["id"])
        assert made.json()["status"] == "queued"

        def ended() -> Training | None:
            loop.step(settings)
            t = _row(settings, tid)
            return t if t.status in ("succeeded", "failed", "cancelled") else None

        t = wait_for(ended, 240, "the local job to end", every=0.3)
        assert t.status == "succeeded", (t.status_reason, _events(settings, tid))
        assert api.get(f"/api/v1/trainings/{tid}", headers=bearer(token)).json()["status"] == "succeeded"
    with session_scope(settings) as sess:
        job = sess.scalars(select(PoolJob).where(PoolJob.training_id == tid)).one()
        steps = sorted(sess.scalars(select(TrainingMetric.step).where(TrainingMetric.training_id == tid)))
    events = " | ".join(_events(settings, tid))
    # The kind's words, through the product's one path: submitted as the member, waited, ran, ended.
    assert "submitted for 1 GPU(s) in local pool here" in events, events
    assert f"submitted to local pool here as job {job.job_id}, as Unix account {entry.pw_name}" in events, events
    assert f"local job {job.job_id} is pending: waiting for a free slot" in events, events
    assert f"running in local pool here on {NODE} as job {job.job_id}" in events, events
    assert f"local job {job.job_id} completed" in (t.status_reason or "")
    # The job's state in gpufleet's words, whatever the kind calls it; the progress and the output came back.
    assert job.state == "completed" and job.exit_code == 0 and job.nodes == NODE
    assert steps and steps[-1] == TINY["max_steps"] and t.step == TINY["max_steps"]
    assert f"[gpufleet] job {job.job_id} on {NODE}: ranks on cuda:0" in log_path(settings, tid).read_text()
    # It ran as the member's own account, as the Slurm kind's jobs do.
    ckpt = Path(service.get_root(settings, "here")) / str(tid) / "checkpoints"
    written = [p for p in ckpt.iterdir() if p.name.startswith("step-")]
    assert written and all(os.stat(p).st_uid == entry.pw_uid for p in written)
    # The usage report's figures come from the kind's own accounting.
    watch.account(settings)
    with session_scope(settings) as sess:
        assert sess.scalar(select(PoolJob.accounted_by).where(PoolJob.id == job.id)) == "local"


def test_a_pools_settings_are_its_kinds_and_a_kind_this_server_lacks_is_refused(settings, place) -> None:
    with write_session(settings) as sess:
        with pytest.raises(service.PoolError, match="a local pool takes slots, not partition"):
            service.add(sess, settings, service.PoolSpec(name="other", kind=place.name,
                                                         options={"partition": "gpu"}))
        with pytest.raises(service.PoolError, match="no kind of pool 'k8s'; this server knows"):
            service.add(sess, settings, service.PoolSpec(name="other", kind="k8s"))
    with session_scope(settings) as sess:
        assert service.get(sess, "here").options == {"slots": 2}
        assert [p.name for p in service.listed(sess)] == ["here"]
