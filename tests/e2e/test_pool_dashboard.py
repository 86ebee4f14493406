"""A member sends a training to a Slurm pool from the dashboard and watches it run as their own Unix account.

The real server (sign-in on, the member signed in with their API token), the real Slurm of the tests
(tests/support/slurm.py: two nodes of two GPUs), Debian's Chromium. The API process's pool loop submits the
job as the member; the page follows it to the end.
"""

from __future__ import annotations

import re
import secrets
import uuid
import tempfile
from pathlib import Path

import pytest

from gpufleet.config import load_settings
from gpufleet.db.pools import PoolJob
from gpufleet.db.session import session_scope, write_session
from gpufleet.pools import service as pools
from sqlalchemy import select
from support.servers import make_token, serve_process
from support.slurm import PARTITION, slurm, slurm_cluster  # noqa: F401 - the fixture
from support.unix import short_name, unix_account

from .conftest import FLEET
from .test_dashboard import UUID, _wait_status

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_a_member_sends_a_training_to_the_pool_from_the_form_and_it_runs_as_them(
        browser, dashboard_built, slurm_cluster, tmp_path: Path, screenshots: Path) -> None:  # noqa: F811
    name = short_name("pe")
    data_dir = tmp_path / "data"
    # The server serves 2 requests at once, so each page's opening burst of reads meets 429s (as on a
    # loaded server): the dashboard sends them again after their Retry-After, and every panel fills in.
    env = {**FLEET, "GPUFLEET_AUTH": "on", "GPUFLEET_SECRET_KEY": secrets.token_urlsafe(32),
           "GPUFLEET_MAX_CONCURRENT_REQUESTS": "2"}
    with unix_account(name) as member:
        token = make_token(data_dir, name, "member", **env)
        settings = load_settings(data_dir=data_dir)
        root = Path(tempfile.mkdtemp(prefix="gpufleet-pool-"))
        root.chmod(0o755)
        with write_session(settings) as sess:
            pools.add(sess, settings, pools.PoolSpec(name="cluster", options={"partition": PARTITION},
                                                     gpus_per_node=2,
                                                     gpu_model="H100-80GB", gpu_memory=80 * 2**30,
                                                     checkpoint_root=str(root)))
        with serve_process(data_dir, **env) as srv:
            ctx = browser.new_context(base_url=srv.url, viewport={"width": 1280, "height": 800})
            page = ctx.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.set_default_timeout(20_000)
            page.goto("/")
            page.get_by_label("Token").fill(token)
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_function("document.querySelectorAll(\"[data-testid^='gpu-card-']\").length === 4",
                                   timeout=40_000)

            page.goto("/trainings/new")
            page.get_by_label("Steps", exact=True).wait_for()
            page.get_by_label("Name", exact=True).fill("e2e-on-slurm")
            page.get_by_label("Where").select_option("cluster")
            page.get_by_label("GPUs wanted").fill("4")
            page.get_by_label("Steps", exact=True).fill("6")
            page.get_by_label("Log every (steps)").fill("1")
            page.get_by_label("Checkpoint every (steps)").fill("3")
            on_pool = page.get_by_test_id("on-pool")
            on_pool.wait_for()
            assert "4 GPUs in Slurm pool cluster" in on_pool.inner_text()
            assert "over 2 nodes of 2 GPUs" in on_pool.inner_text()
            page.screenshot(path=str(screenshots / "training-new-on-pool.png"), full_page=True)
            page.get_by_role("button", name="Start training").click()
            page.wait_for_url(re.compile(rf"/trainings/{UUID}$"), timeout=15_000)
            tid = page.url.rsplit("/", 1)[1]

            _wait_status(page, "succeeded", 240)
            events = page.get_by_test_id("events").inner_text()
            assert "submitted for 4 GPU(s) in Slurm pool cluster" in events, events
            page.wait_for_function(
                "Number(document.querySelector(\"[data-testid='loss-chart']\")?.dataset.points) >= 6", timeout=20_000)
            assert "Slurm pool cluster" in page.get_by_text("Slurm pool cluster · 4 ranks").inner_text()
            # Its checkpoints are in its folder on the pool's shared file system, listed for download.
            page.reload()
            files = page.get_by_test_id("training-files")
            files.wait_for()
            assert "checkpoints/" in files.inner_text(), files.inner_text()
            page.screenshot(path=str(screenshots / "training-on-pool-succeeded.png"), full_page=True)
            ctx.close()
            assert not errors, f"the dashboard threw in the browser: {errors}"

        # Slurm ran it over both nodes, as the member who pressed the button.
        with session_scope(settings) as sess:
            job = sess.scalars(select(PoolJob).where(PoolJob.training_id == uuid.UUID(tid))).one()
            job_id, nodes = job.job_id, job.nodes
        assert nodes == "sim[1-2]"
        record = slurm("scontrol", "show", "job", job_id)
        assert f"UserId={member.pw_name}({member.pw_uid})" in record and "NumNodes=2 " in record
