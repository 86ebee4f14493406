"""The Usage page and ``gpufleet usage`` say what the checkpoint store holds per user and group: a live
`gpufleet serve` with a store set (the S3-compatible server on loopback), checkpoints of two members'
trainings in it, the page in Chromium and the CLI as its user would run them."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest
from sqlalchemy import select
from support.s3server import s3_server
from support.servers import gpufleet, serve_env, serve_process
from support.storekit import recipe_checkpoint, store_for

from gpufleet.ckptstore import upload_checkpoint
from gpufleet.config import load_settings
from gpufleet.db.session import write_session
from gpufleet.lifecycle.models import Training, new_training
from gpufleet.users.accounts import add_user
from gpufleet.users.groups import add_member, create_group

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
BUCKET = "ckpts"


def _training(settings, owner: str) -> str:
    with write_session(settings) as sess:
        t = new_training(kind="recipe", recipe="mlp", owner=owner, name=f"t-{uuid.uuid4().hex[:6]}", world_size=1,
                         priority=0, preemptible=False)
        t.status = "succeeded"  # it ran elsewhere: nothing here runs it and uploads more meanwhile
        sess.add(t)
        sess.flush()
        return str(t.id)


def test_the_usage_page_and_cli_show_the_bytes_each_member_keeps_in_the_store(
        browser, dashboard_built, tmp_path: Path, screenshots: Path) -> None:
    with s3_server(tmp_path / "moto.log", buckets=(BUCKET,)) as s3:
        store = store_for(s3, BUCKET, tmp_path)
        data = tmp_path / "data"
        env = {"GPUFLEET_SIMULATE": "2xH100-80GB", "GPUFLEET_CHECKPOINT_STORE": f"s3://{BUCKET}/team",
               "GPUFLEET_CHECKPOINT_STORE_ENDPOINT": s3.endpoint,
               "GPUFLEET_CHECKPOINT_STORE_CREDENTIALS_FILE": str(s3.credentials_file(tmp_path))}
        with serve_process(data, **env) as srv:
            settings = load_settings(data_dir=data)
            with write_session(settings) as sess:
                add_user(sess, "alice")
                add_user(sess, "bob")
                create_group(sess, "vision")
                add_member(sess, "vision", "alice")
                add_member(sess, "vision", "bob")
            # Alice's two trainings keep two checkpoints between them, bob's one keeps one, larger.
            for owner, step, size in (("alice", 10, 3000), ("alice", 20, 5000), ("bob", 10, 3 * 2**20)):
                tid = _training(settings, owner)
                folder = tmp_path / "made" / tid
                folder.mkdir(parents=True)
                upload_checkpoint(store, tid, folder, recipe_checkpoint(folder, step, size), host="elsewhere")
            # What the store holds, counted here from its own listing: every object under a training's folder.
            with write_session(settings) as sess:
                owner_of = {str(tid): owner for tid, owner in sess.execute(select(Training.id, Training.owner))}
            held = {"alice": 0, "bob": 0}
            for page_ in s3.client().get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix="team/"):
                for obj in page_.get("Contents", []):
                    held[owner_of[obj["Key"].split("/")[1]]] += obj["Size"]
            assert held["bob"] > 3 * 2**20 > held["alice"] > 8000

            ctx = browser.new_context(base_url=srv.url, viewport={"width": 1280, "height": 800})
            try:
                page = ctx.new_page()
                page.set_default_timeout(15_000)
                page.goto("/")
                page.get_by_role("link", name="Usage").click()
                table = page.get_by_test_id("stored-table")
                table.wait_for()
                assert page.get_by_text(f"s3://{BUCKET}/team").first.is_visible()
                rows = [r.locator("td").all_inner_texts() for r in table.locator("tbody tr").all()]
                assert rows == [["bob", "3 MiB"], ["alice", f"{round(held['alice'] / 1024)} KiB"]], rows
                cell = table.locator('tr[data-name="alice"] td').nth(1)
                assert cell.get_attribute("title") == f"{held['alice']} bytes"
                page.screenshot(path=str(screenshots / "usage-stored.png"), full_page=True)

                page.get_by_role("button", name="By group").click()
                group = page.get_by_test_id("stored-table").locator('tr[data-name="vision"] td')
                group.first.wait_for()
                assert group.nth(1).get_attribute("title") == f"{held['alice'] + held['bob']} bytes"
            finally:
                ctx.close()

            out = subprocess.run([*gpufleet(), "usage"], env=serve_env(data, **env), capture_output=True, text=True,
                                 timeout=120)
            assert out.returncode == 0, out.stderr
            assert f"checkpoints stored now in s3://{BUCKET}/team:" in out.stdout, out.stdout
            lines = out.stdout.split("checkpoints stored now", 1)[1].splitlines()[1:]
            assert lines[:3] == ["user\tbytes\tsize", f"bob\t{held['bob']}\t3.0 MiB",
                                 f"alice\t{held['alice']}\t{held['alice'] / 1024:.1f} KiB"], out.stdout
