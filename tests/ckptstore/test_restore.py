"""Before a launch the worker brings the store's newest complete checkpoint when its host has nothing
newer: a training that ran elsewhere, a training back on a host whose folder is behind, a clone
(`run --from ID`) whose source never ran on this host; a host ahead of the store keeps its own."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select
from support.storekit import recipe_checkpoint, settings_for
from support.fleet import make_settings
from support.s3server import S3Server

from gpufleet.ckptstore import upload_checkpoint
from gpufleet.config import Settings
from gpufleet.db.models import TrainingEvent
from gpufleet.db.session import session_scope
from gpufleet.jobs import ckpt_restore, ckpt_uploads
from gpufleet.jobs.logs import BoundedLog
from gpufleet.lifecycle.models import Training, new_training


@pytest.fixture
def host(s3: S3Server, bucket: str, tmp_path: Path) -> Iterator[Settings]:
    s = make_settings(tmp_path, "sqlite", **settings_for(s3, bucket, tmp_path).model_dump())
    assert ckpt_uploads.start(s, s) is not None
    yield s
    ckpt_uploads.stop()


def _row(s: Settings, **fields) -> Training:
    with session_scope(s) as sess:
        t = new_training(kind="recipe", recipe="mlp", owner="ada", name=f"t-{uuid.uuid4().hex[:6]}", world_size=1,
                         priority=0, preemptible=False, **fields)
        sess.add(t)
        sess.flush()
        sess.expunge(t)
        return t


def _reasons(s: Settings, tid: uuid.UUID) -> list[str]:
    with session_scope(s) as sess:
        return list(sess.execute(select(TrainingEvent.reason).where(TrainingEvent.training_id == tid)).scalars())


def test_a_clone_whose_source_never_ran_here_starts_from_the_sources_newest_in_the_store(
        host: Settings, tmp_path: Path) -> None:
    src = _row(host)
    elsewhere = tmp_path / "other-host" / str(src.id)
    elsewhere.mkdir(parents=True)
    store = ckpt_uploads.current().store  # type: ignore[union-attr]
    upload_checkpoint(store, str(src.id), elsewhere, recipe_checkpoint(elsewhere, 30), host="other-host")
    clone = _row(host, resumed_from=src.id)
    mine = Path(host.checkpoint_root) / str(clone.id)
    got = ckpt_restore.restore(host, clone, mine, BoundedLog(tmp_path / "log", 1 << 16))
    assert got is not None and got.step == 30
    assert (mine / "step-30" / "meta.json").is_file()
    said = _reasons(host, clone.id)
    assert any(f"checkpoint step-30 of training {src.id} (step 30), fetched from s3://" in r for r in said)


def test_the_host_fetches_only_what_is_newer_than_its_own(host: Settings, tmp_path: Path) -> None:
    t = _row(host)
    store = ckpt_uploads.current().store  # type: ignore[union-attr]
    elsewhere = tmp_path / "other-host" / str(t.id)
    elsewhere.mkdir(parents=True)
    upload_checkpoint(store, str(t.id), elsewhere, recipe_checkpoint(elsewhere, 50))
    here = Path(host.checkpoint_root) / str(t.id)
    here.mkdir(parents=True)
    recipe_checkpoint(here, 20)  # this host is behind: it ran here before, then elsewhere
    log = BoundedLog(tmp_path / "log", 1 << 16)
    assert ckpt_restore.restore(host, t, here, log).step == 50  # type: ignore[union-attr]
    recipe_checkpoint(here, 70)  # ahead of the store (its upload not through yet): kept as it is
    assert ckpt_restore.restore(host, t, here, log) is None
    assert sorted(p.name for p in here.iterdir()) == ["step-20", "step-50", "step-70"]
