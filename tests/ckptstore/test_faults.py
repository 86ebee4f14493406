"""The store set wrong is one clear error at start; the store away fails no training: the upload waits,
an event says so, and it goes through once the store is back."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from sqlalchemy import select
from support.storekit import recipe_checkpoint, settings_for, store_for
from support.fleet import make_settings, wait_for
from support.s3server import S3Server, s3_server

from gpufleet.ckptstore import StoreError, open_store, read_latest
from gpufleet.ckptstore.client import StoreUnreachable, check
from gpufleet.config import CheckpointStoreSettings
from gpufleet.db.models import TrainingEvent
from gpufleet.db.session import session_scope
from gpufleet.jobs.ckpt_uploads import Job, Uploads
from gpufleet.jobs.embedded import settings_env
from gpufleet.lifecycle.models import new_training


def test_credentials_the_store_refuses_are_one_clear_error(tmp_path: Path) -> None:
    with s3_server(tmp_path / "moto.log", buckets=("guarded",), checks_keys=True) as guarded:
        store = open_store(settings_for(guarded, "guarded", tmp_path))
        assert store is not None
        with pytest.raises(StoreError, match="refused these credentials for bucket 'guarded'"):
            check(store)


def test_a_worker_with_a_missing_bucket_stops_at_start_naming_it(s3: S3Server, tmp_path: Path) -> None:
    s = make_settings(tmp_path, "sqlite", **settings_for(s3, "not-made-yet", tmp_path).model_dump())
    out = subprocess.run([sys.executable, "-m", "gpufleet.jobs.worker", "--no-agent"], env=settings_env(s),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "bucket 'not-made-yet' does not exist" in out.stderr


def test_a_store_that_does_not_answer_at_start_is_waited_for_not_refused(tmp_path: Path) -> None:
    from support.servers import free_port

    from gpufleet.jobs import ckpt_uploads

    db = make_settings(tmp_path, "sqlite")
    creds = tmp_path / "creds"
    creds.write_text("[default]\naws_access_key_id = k\naws_secret_access_key = s\n")
    settings = CheckpointStoreSettings(checkpoint_store="s3://somewhere", checkpoint_store_credentials_file=creds,
                                       checkpoint_store_endpoint=f"http://127.0.0.1:{free_port()}")  # nobody there
    store = open_store(settings)
    assert store is not None
    with pytest.raises(StoreUnreachable):
        check(store)
    try:
        assert ckpt_uploads.start(settings, db) is not None  # the worker starts; uploads wait for the store
    finally:
        ckpt_uploads.stop()


def test_the_store_away_delays_the_upload_and_never_drops_it(s3: S3Server, tmp_path: Path) -> None:
    db = make_settings(tmp_path, "sqlite")
    with session_scope(db) as sess:
        t = new_training(kind="recipe", recipe="mlp", owner="ada", name="t", world_size=1, priority=0,
                         preemptible=False)
        sess.add(t)
        sess.flush()
        tid = t.id
    bucket = f"later-{uuid.uuid4().hex[:8]}"  # not there yet: every upload refused until it is made
    settings = settings_for(s3, bucket, tmp_path, checkpoint_store_retry_s=0.05)
    store = store_for(s3, bucket, tmp_path)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    uploads = Uploads(store, settings, db)
    try:
        uploads.offer(Job(tid, ckpt, recipe_checkpoint(ckpt, 10), {"loss": 1.0}, 1, "host-a"))

        def reasons() -> list[str]:
            with session_scope(db) as sess:
                return list(sess.execute(select(TrainingEvent.reason).where(
                    TrainingEvent.training_id == tid).order_by(TrainingEvent.seq)).scalars())

        wait_for(lambda: any("is not taking checkpoint step-10" in r for r in reasons()), 60, "the warning")
        assert not uploads.idle()  # still waiting, not dropped
        s3.client().create_bucket(Bucket=bucket)  # the store is back
        wait_for(uploads.idle, 60, "the upload to go through")
    finally:
        uploads.close()
    latest, _ = read_latest(store, str(tid))
    assert latest is not None and latest.step == 10
    said = reasons()
    assert sum("is not taking" in r for r in said) == 1  # once per outage, not once per try
    assert any("checkpoint step-10 uploaded to s3://" in r for r in said)
