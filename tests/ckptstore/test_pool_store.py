"""A pool's trainings and the store, on a real Slurm cluster: each checkpoint the job reports is uploaded
from the pool's root, and a training whose pool folder has none of its checkpoints (it ran elsewhere)
is sent with the store's newest, given to the member, and its ranks resume at that step."""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select
from support.storekit import settings_for
from support.fleet import make_settings, wait_for
from support.s3server import S3Server
from support.slurm import PARTITION, slurm_cluster  # noqa: F401 - the fixture
from support.unix import short_name, unix_account

from gpufleet.ckptstore import read_latest
from gpufleet.db.session import session_scope, write_session
from gpufleet.jobs import ckpt_uploads
from gpufleet.jobs import pool_loop as loop
from gpufleet.lifecycle.models import Training, TrainingEvent
from gpufleet.pools import service
from gpufleet.trainings.resume import resume
from gpufleet.users.accounts import add_user
from gpufleet.wire.training_requests import TrainingCreate, TrainingResume

pytestmark = [pytest.mark.slow]
TINY = {"max_steps": 6, "global_batch_size": 8, "checkpoint_every": 3, "synthetic_samples": 64}


@pytest.fixture
def pool_host(s3: S3Server, bucket: str, tmp_path: Path, slurm_cluster) -> Iterator:  # noqa: F811
    s = make_settings(tmp_path, "sqlite", **settings_for(s3, bucket, tmp_path).model_dump())
    root = Path(tempfile.mkdtemp(prefix="gpufleet-pool-"))
    root.chmod(0o755)
    with write_session(s) as sess:
        service.add(sess, s, service.PoolSpec(name="cluster", options={"partition": PARTITION}, gpus_per_node=2,
                                              checkpoint_root=str(root)))
    uploads = ckpt_uploads.start(s, s)
    assert uploads is not None
    yield s, uploads, root
    ckpt_uploads.stop()


def _until(settings, tid: uuid.UUID, ok, what: str) -> Training:
    def check() -> Training | None:
        loop.step(settings)
        with session_scope(settings) as sess:
            t = sess.get(Training, tid)
            sess.expunge(t)
        return t if ok(t) else None
    return wait_for(check, 240, what, every=0.5)


def _events(settings, tid: uuid.UUID) -> list[str]:
    with session_scope(settings) as sess:
        return [e.reason or "" for e in sess.scalars(select(TrainingEvent).where(
            TrainingEvent.training_id == tid).order_by(TrainingEvent.seq))]


def test_a_pool_training_goes_on_from_the_stores_checkpoint_when_its_pool_folder_has_none(pool_host) -> None:
    s, uploads, root = pool_host
    name = short_name("ps")
    with unix_account(name) as member:
        with write_session(s) as sess:
            add_user(sess, name, "member")
            tid = service.create_training(sess, s, TrainingCreate(name="pooled", recipe="mlp", config=TINY,
                                                                  world_size=1, pool="cluster"), name).id
        t = _until(s, tid, lambda t: t.status in ("succeeded", "failed", "cancelled"), "the first job")
        assert t.status == "succeeded", (t.status_reason, _events(s, tid))
        wait_for(uploads.idle, 120, "the pool's checkpoints uploaded")
        latest, _ = read_latest(uploads.store, str(tid))
        assert latest is not None and latest.name == "step-6"
        ckpt = root / str(tid) / "checkpoints"
        for p in ckpt.iterdir():  # the pool never saw this training's checkpoints: they were made elsewhere
            shutil.rmtree(p) if p.is_dir() else p.unlink()
        with write_session(s) as sess:
            resume(sess, tid, TrainingResume(config={"max_steps": 9}), name)
        t = _until(s, tid, lambda t: t.status in ("succeeded", "failed", "cancelled"), "the resumed job")
        assert t.status == "succeeded" and t.step == 9, (t.status_reason, _events(s, tid))
        lines = [json.loads(x) for x in (ckpt.parent / f"progress-{t.attempt}.jsonl").read_text().splitlines()]
        assert [(x["step"], Path(x["path"]).name) for x in lines if x["type"] == "resume"] == [(6, "step-6")]
        assert (ckpt / "step-6" / "meta.json").stat().st_uid == member.pw_uid  # given to the member
        said = _events(s, tid)
        assert any(r.startswith("resuming from checkpoint step-6 (step 6), fetched from s3://") for r in said), said

