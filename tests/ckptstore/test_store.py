"""Checkpoints on the store: uploaded whole and verified, ``latest`` only ever at a complete and newest one,
downloaded and verified anywhere; against a real S3-compatible server on loopback."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from support.storekit import recipe_checkpoint, settings_for, store_for, tree
from support.s3server import S3Server

from gpufleet.ckptstore import StoreError, advance, fetch_newest, open_store, read_latest, upload_checkpoint
from gpufleet.ckptstore.client import check
from gpufleet.ckptstore.manifest import Manifest


def test_a_checkpoint_uploaded_on_one_host_is_fetched_whole_on_another(s3: S3Server, bucket: str,
                                                                        tmp_path: Path) -> None:
    store = store_for(s3, bucket, tmp_path)
    here, there = tmp_path / "host-a" / "t1", tmp_path / "host-b" / "t1"
    here.mkdir(parents=True)
    name = recipe_checkpoint(here, 40)
    m = upload_checkpoint(store, "t1", here, name, metrics={"loss": 0.5})
    assert {f.path for f in m.files} == {"step-40/model.bin", "step-40/optim/state.bin", "step-40/meta.json"}
    latest, _ = read_latest(store, "t1")
    assert latest is not None and (latest.name, latest.step) == ("step-40", 40)
    got = fetch_newest(store, "t1", there)
    assert got is not None and got.step == 40
    assert tree(there) == tree(here)  # every file, byte for byte; no staging folder left behind


def test_a_link_in_a_members_checkpoint_is_never_followed(s3: S3Server, bucket: str, tmp_path: Path) -> None:
    store = store_for(s3, bucket, tmp_path)
    ckpt = tmp_path / "t2"
    ckpt.mkdir()
    name = recipe_checkpoint(ckpt, 5)
    secret = tmp_path / "server-only"
    secret.write_text("root's file")
    (ckpt / name / "leak.bin").symlink_to(secret)
    m = upload_checkpoint(store, "t2", ckpt, name)
    assert "step-5/leak.bin" not in {f.path for f in m.files}
    (ckpt / "step-6").symlink_to(ckpt / name)  # the checkpoint itself a link: refused
    with pytest.raises(StoreError):
        upload_checkpoint(store, "t2", ckpt, "step-6")


def test_latest_never_moves_back_to_an_older_checkpoint(s3: S3Server, bucket: str, tmp_path: Path) -> None:
    store = store_for(s3, bucket, tmp_path)
    ckpt = tmp_path / "t3"
    ckpt.mkdir()
    upload_checkpoint(store, "t3", ckpt, recipe_checkpoint(ckpt, 20))
    upload_checkpoint(store, "t3", ckpt, recipe_checkpoint(ckpt, 10))  # a late upload of an older one
    latest, _ = read_latest(store, "t3")
    assert latest is not None and latest.step == 20


def test_racing_writers_leave_latest_at_the_newest(s3: S3Server, bucket: str, tmp_path: Path) -> None:
    store = store_for(s3, bucket, tmp_path)
    steps = [3, 9, 1, 7, 5, 8, 2, 6]
    go = threading.Barrier(len(steps))
    moved: list[bool] = []

    def race(step: int) -> None:
        m = Manifest(training="t4", name=f"step-{step}", step=step, upload=f"u{step}", uploaded_at=time.time())
        go.wait()
        moved.append(advance(store, m, f"team/t4/checkpoints/step-{step}/u{step}/manifest.json"))

    threads = [threading.Thread(target=race, args=(s,)) for s in steps]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    latest, _ = read_latest(store, "t4")
    assert latest is not None and latest.step == 9
    assert any(moved) and not all(moved)  # some writers lost to a newer pointer and left it alone


_UPLOADER = """
import sys
from pathlib import Path
from boto3.s3.transfer import TransferConfig
from gpufleet.ckptstore import open_store, upload_checkpoint
from gpufleet.config import CheckpointStoreSettings
store = open_store(CheckpointStoreSettings.model_validate_json(sys.argv[1]))
store.transfer = TransferConfig(multipart_threshold=5 * 2**20, multipart_chunksize=5 * 2**20, max_concurrency=1)
def after_part(**_):
    print("part", flush=True)
    sys.stdin.read()  # held here, mid-multipart, until killed
store.client.meta.events.register("after-call.s3.UploadPart", after_part)
upload_checkpoint(store, "t5", Path(sys.argv[2]), sys.argv[3])
"""


def test_an_uploader_killed_mid_multipart_leaves_latest_at_the_previous_checkpoint(
        s3: S3Server, bucket: str, tmp_path: Path) -> None:
    settings = settings_for(s3, bucket, tmp_path)
    store = store_for(s3, bucket, tmp_path)
    ckpt = tmp_path / "t5"
    ckpt.mkdir()
    upload_checkpoint(store, "t5", ckpt, recipe_checkpoint(ckpt, 100))
    big = recipe_checkpoint(ckpt, 200, size=12 * 2**20)  # three parts of 5 MiB
    child = subprocess.Popen([sys.executable, "-c", _UPLOADER, settings.model_dump_json(), str(ckpt), big],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "part"
        assert store.client.list_multipart_uploads(Bucket=bucket).get("Uploads")  # under way
        child.kill()  # SIGKILL: no handler, no clean-up
    finally:
        child.wait(30)
    latest, _ = read_latest(store, "t5")
    assert latest is not None and latest.step == 100
    elsewhere = tmp_path / "elsewhere" / "t5"
    got = fetch_newest(store, "t5", elsewhere)
    assert got is not None and got.step == 100 and os.listdir(elsewhere) == ["step-100"]
    upload_checkpoint(store, "t5", ckpt, big)  # the next try completes it
    latest, _ = read_latest(store, "t5")
    assert latest is not None and latest.step == 200


def test_a_missing_bucket_is_named_at_start(s3: S3Server, tmp_path: Path) -> None:
    store = open_store(settings_for(s3, "no-such-bucket-here", tmp_path))
    assert store is not None
    with pytest.raises(StoreError, match="bucket 'no-such-bucket-here' does not exist"):
        check(store)


def test_credentials_come_from_the_named_file_only(s3: S3Server, bucket: str, tmp_path: Path) -> None:
    bad = tmp_path / "creds"
    bad.write_text("aws_access_key_id = x\n")
    with pytest.raises(StoreError, match="no \\[default\\] profile"):
        open_store(settings_for(s3, bucket, tmp_path).model_copy(update={"checkpoint_store_credentials_file": bad}))
    with pytest.raises(StoreError, match="CREDENTIALS_FILE is not"):
        open_store(settings_for(s3, bucket, tmp_path).model_copy(update={"checkpoint_store_credentials_file": None}))


def test_a_download_never_writes_through_a_link_the_member_planted(s3: S3Server, bucket: str,
                                                                  tmp_path: Path) -> None:
    store = store_for(s3, bucket, tmp_path)
    src = tmp_path / "src" / "t6"
    src.mkdir(parents=True)
    upload_checkpoint(store, "t6", src, recipe_checkpoint(src, 30))
    dst = tmp_path / "dst" / "t6"
    dst.mkdir(parents=True)
    server_dir = tmp_path / "server-only"
    server_dir.mkdir()
    (dst / "step-30").symlink_to(server_dir)  # at the checkpoint's name
    (dst / ".step-30.fetch.tmp").symlink_to(server_dir)  # and at the staging name
    assert fetch_newest(store, "t6", dst) is not None
    assert list(server_dir.iterdir()) == []
    assert not (dst / "step-30").is_symlink() and tree(dst) == tree(src)
