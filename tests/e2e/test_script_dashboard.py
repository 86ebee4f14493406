"""A user's own script in the dashboard: `gpufleet run` against a real `gpufleet serve`, then the detail page.

The script is the torchrun-style DDP script with `gpufleet.report` from the
script-training tests; its loss curve, command, GPUs and rank-prefixed log
must show on the training's page.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.scripts import RESUMABLE_SCRIPT, write_project

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_script_training_detail_page_shows_its_loss_curve_and_ranks_log(page, server, screenshots: Path,
                                                                         tmp_path) -> None:
    project = write_project(tmp_path / "proj", RESUMABLE_SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    res = subprocess.run(
        [sys.executable, "-m", "gpufleet.cli", "run", "--gpus", "2", "--memory", "1GiB", "--name", "e2e-script",
         "--", "python", "train.py", "--steps", "15"],
        cwd=project, env={**env, "GPUFLEET_SERVER": server.url}, capture_output=True, text=True, timeout=300,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    tid = next(x.split()[1] for x in res.stdout.splitlines() if x.startswith("submitted "))
    page.goto(f"/trainings/{tid}")
    page.get_by_test_id("training-name").wait_for()
    assert page.get_by_test_id("training-name").inner_text() == "e2e-script"
    assert "succeeded" in page.get_by_test_id("training-status").inner_text()
    page.wait_for_function(
        "Number(document.querySelector(\"[data-testid='loss-chart']\")?.dataset.points) >= 15", timeout=30_000
    )
    assert "python train.py --steps 15" in page.get_by_test_id("script-command").inner_text()
    page.wait_for_function(
        "(document.querySelector(\"[data-testid='log']\")?.innerText ?? '').includes('[rank 1]')", timeout=15_000
    )
    assert "2 ranks" in page.locator("main").inner_text()
    # Every reported scalar can be charted: the script reports lr besides its loss.
    page.get_by_test_id("series-picker").select_option("lr")
    page.wait_for_function(
        "Number(document.querySelector(\"[data-testid='series-chart']\")?.dataset.points) >= 15", timeout=30_000
    )
    # Its checkpoints are in the Files panel, each a download link; an ended training offers Resume.
    link = page.get_by_test_id("training-files").get_by_role("link", name="checkpoints/step-000014.pt")
    link.wait_for()
    assert link.get_attribute("href") == f"/api/v1/trainings/{tid}/files/checkpoints/step-000014.pt"
    # A click downloads it through a single-use link the page asks for (a navigation carries no page key).
    with page.expect_download(timeout=30_000) as got:
        link.click()
    saved = got.value.path()
    assert got.value.failure() is None and Path(saved).stat().st_size > 0
    assert "ticket=" in got.value.url and f"/api/v1/trainings/{tid}/files/checkpoints/step-000014.pt" in got.value.url
    assert page.get_by_role("button", name="Resume").is_visible()
    page.screenshot(path=str(screenshots / "training-script.png"), full_page=True)
