"""A training's checkpoints travel from the team's hosts to a Slurm pool and back through the store, as a
member moves her work with ``run --from ID --pool`` (and back without ``--pool``): a real ``gpufleet
worker`` on PostgreSQL and Redis, the test Slurm cluster, the S3-compatible server, and no folder shared
between the host's checkpoint root and the pool's root. Each leg goes on from the step the last one ended
at, and its events say where its checkpoint came from."""

from __future__ import annotations

import json
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select
from support.fleet import FINAL, make_settings, register, unique, wait_for
from support.s3server import S3Server
from support.slurm import PARTITION, slurm_cluster  # noqa: F401 - the fixture
from support.storekit import settings_for
from support.unix import short_name, unix_account

from gpufleet.ckptstore import read_latest
from gpufleet.db.session import session_scope, write_session
from gpufleet.jobs import ckpt_uploads
from gpufleet.jobs import pool_loop as loop
from gpufleet.lifecycle.models import Training, TrainingEvent
from gpufleet.pools import placement, service
from gpufleet.users.accounts import add_user
from gpufleet.wire.training_requests import TrainingCreate

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]
MLP = {"in_features": 8, "hidden": [16], "out_features": 3, "task": "classification", "synthetic_samples": 128,
       "global_batch_size": 16, "log_every": 2, "checkpoint_every": 4, "lr": 3e-3}


@pytest.fixture
def fleet(s3: S3Server, bucket: str, tmp_path: Path, request: pytest.FixtureRequest, slurm_cluster,  # noqa: F811
          workers, scheduler) -> Iterator:
    """One host with its worker and the team's scheduler, and one pool whose root the host never sees; the
    pool's loop (the API process's part) and its uploads run here."""
    store = settings_for(s3, bucket, tmp_path).model_dump(include={
        "checkpoint_store", "checkpoint_store_endpoint", "checkpoint_store_credentials_file"})
    s = make_settings(tmp_path / "host", "postgresql", request, simulate="1xH100-80GB", host_name=unique("h"),
                      lease_s=8.0, **store)
    root = Path(tempfile.mkdtemp(prefix="gpufleet-pool-"))
    root.chmod(0o755)
    assert not Path(s.checkpoint_root).is_relative_to(root) and not root.is_relative_to(s.checkpoint_root)
    with write_session(s) as sess:
        service.add(sess, s, service.PoolSpec(name="cluster", options={"partition": PARTITION}, gpus_per_node=2,
                                              checkpoint_root=str(root)))
    register(s)
    workers(s)
    scheduler(s)
    uploads = ckpt_uploads.start(s, s)
    assert uploads is not None
    yield s, uploads, root
    ckpt_uploads.stop()


def _create(s, owner: str, **fields) -> uuid.UUID:
    with write_session(s) as sess:
        return placement.create_placed(sess, s, TrainingCreate(recipe="mlp", world_size=1, **fields),
                                       owner).training.id


def _until_final(s, tid: uuid.UUID, *, pool: bool) -> Training:
    def check() -> Training | None:
        if pool:
            loop.step(s)
        with session_scope(s) as sess:
            t = sess.get(Training, tid)
            sess.expunge(t)
        return t if t.status in FINAL else None
    return wait_for(check, 300, f"training {tid} to end", every=0.5)


def _reasons(s, tid: uuid.UUID) -> list[str]:
    with session_scope(s) as sess:
        return [e.reason or "" for e in sess.scalars(select(TrainingEvent).where(
            TrainingEvent.training_id == tid).order_by(TrainingEvent.seq))]


def _resumed_at(folder: Path) -> list[int]:
    lines = []
    for p in sorted(folder.glob("progress-*.jsonl")):
        lines += [json.loads(x) for x in p.read_text().splitlines() if '"resume"' in x]
    return [x["step"] for x in lines if x.get("type") == "resume"]


def _newest_in_store(uploads, tid: uuid.UUID, step: int) -> None:
    def there() -> bool:
        latest, _ = read_latest(uploads.store, str(tid))
        return latest is not None and latest.name == f"step-{step}"
    wait_for(there, 120, f"step-{step} of {tid} named latest in the store", every=0.5)


def test_a_training_moves_from_the_hosts_to_the_pool_and_back_going_on_from_its_step(fleet) -> None:
    s, uploads, root = fleet
    name = short_name("tv")
    with unix_account(name):
        with write_session(s) as sess:
            add_user(sess, name, "member")
        # On the team's host: 8 steps, checkpoints uploaded by the host's worker.
        first = _create(s, name, name="on-hosts", config={**MLP, "max_steps": 8})
        t = _until_final(s, first, pool=False)
        assert t.status == "succeeded" and t.pool is None, (t.status_reason, _reasons(s, first))
        _newest_in_store(uploads, first, 8)

        # Into the pool: its root has never seen the first training, so the store's step-8 is brought.
        second = _create(s, name, name="in-pool", config={**MLP, "max_steps": 12}, from_training=first, pool="cluster")
        t = _until_final(s, second, pool=True)
        assert t.status == "succeeded" and t.pool == "cluster" and t.step == 12, (t.status_reason, _reasons(s, second))
        assert _resumed_at(root / str(second)) == [8]
        said = _reasons(s, second)
        assert any(r.startswith(f"resuming from checkpoint step-8 of training {first} (step 8), fetched from s3://")
                   for r in said), said
        wait_for(uploads.idle, 120, "the pool job's checkpoints uploaded")
        _newest_in_store(uploads, second, 12)

        # Back to the hosts: the host's folder has nothing of the pool's training; its step-12 is fetched.
        third = _create(s, name, name="back", config={**MLP, "max_steps": 16}, from_training=second)
        t = _until_final(s, third, pool=False)
        assert t.status == "succeeded" and t.pool is None and t.step == 16, (t.status_reason, _reasons(s, third))
        assert _resumed_at(s.data_dir / "jobs" / str(third)) == [12]
        said = _reasons(s, third)
        assert any(r.startswith(f"resuming from checkpoint step-12 of training {second} (step 12), fetched from")
                   and "pool cluster" in r for r in said), said
        assert not (Path(s.checkpoint_root) / str(second)).exists()  # nothing of the pool's reached the host
