"""A training resumes on a second host that shares no checkpoint root with the first: two `gpufleet
worker` processes with data dirs of their own, PostgreSQL and Redis, the S3-compatible server, a kill -9.

Host A's worker uploads the training's checkpoints as they come; it is killed. The retry lands on host B,
whose checkpoint root has never seen the training: its worker fetches the newest complete checkpoint
from the store, the ranks resume from it (their own ``resume`` line says the step) and the training
finishes; its events say where the checkpoint came from.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import update
from support.storekit import settings_for
from support.fleet import FINAL, get_events, get_training, make_settings, register, unique, wait_for, wait_status
from support.s3server import S3Server

from gpufleet.db.models import Host
from gpufleet.db.session import session_scope

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]

MLP = dict(in_features=8, hidden=[16], out_features=3, task="classification", synthetic_samples=512,
           global_batch_size=32, max_steps=400, log_every=5, checkpoint_every=20, lr=3e-3)


def _host(tmp_path: Path, request: pytest.FixtureRequest, name: str, store: dict):
    return make_settings(tmp_path / name, "postgresql", request, simulate="1xH100-80GB", host_name=unique(name),
                         lease_s=8.0, **store)


def _resume_lines(settings, tid: str) -> list[dict]:
    lines = []
    for p in sorted((settings.data_dir / "jobs" / tid).glob("progress-*.jsonl")):
        lines += [json.loads(x) for x in p.read_text().splitlines() if '"resume"' in x]
    return [x for x in lines if x.get("type") == "resume"]


def test_a_training_resumes_on_a_host_with_no_shared_checkpoint_root(
        s3: S3Server, bucket: str, tmp_path: Path, request: pytest.FixtureRequest, client_for, workers,
        scheduler) -> None:
    store = settings_for(s3, bucket, tmp_path).model_dump(include={
        "checkpoint_store", "checkpoint_store_endpoint", "checkpoint_store_credentials_file"})
    a, b = _host(tmp_path, request, "a", store), _host(tmp_path, request, "b", store)
    assert a.checkpoint_root != b.checkpoint_root
    register(a)
    wa = workers(a)
    scheduler(a)
    c = client_for(a)
    r = c.post("/api/v1/trainings", json={"name": "travels", "recipe": "mlp", "config": MLP})
    assert r.status_code == 201, r.text
    tid = r.json()["id"]
    uploaded = wait_for(lambda: [e for e in get_events(c, tid) if "uploaded to s3://" in e["reason"]
                                 and (e["data"] or {}).get("step", 0) >= 20] or
                        (get_training(c, tid)["status"] in FINAL and pytest.fail(str(get_events(c, tid)))),
                        300, "a checkpoint at step 20 or later in the store", 0.2)
    assert uploaded[0]["data"]["store"] == f"s3://{bucket}/team"
    # Host A goes away at once (its training must not reach its end meanwhile), and only then does B come.
    wa.kill9()
    with session_scope(a) as sess:  # the retry goes to B
        sess.execute(update(Host).where(Host.name == a.host_name).values(status="offline"))
    register(b)
    workers(b)
    body = wait_status(c, tid, FINAL, 300)
    assert body["status"] == "succeeded", (body, get_events(c, tid))
    assert body["host_name"] == b.host_name and body["step"] == MLP["max_steps"]
    fetched = [e for e in get_events(c, tid) if e["reason"].startswith("resuming from checkpoint")]
    assert len(fetched) == 1, get_events(c, tid)
    step = fetched[0]["data"]["step"]
    assert step >= 20 and fetched[0]["data"]["from_host"] == a.host_name
    assert f"fetched from s3://{bucket}/team and verified" in fetched[0]["reason"]
    # B's ranks went on from that step. On a loaded machine B's own lease may lapse too and its training be
    # queued again: that attempt goes on from B's own newer checkpoint, which needs no fetch (one was asserted).
    resumed = [x["step"] for x in _resume_lines(b, tid)]
    assert resumed[:1] == [step] and resumed == sorted(resumed) and len(set(resumed)) == len(resumed), resumed
    assert not (a.checkpoint_root / tid / f"step-{MLP['max_steps']}").exists()  # A never saw the end: nothing shared
