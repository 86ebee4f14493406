"""The Sweeps page in a browser: a real sweep (started with `gpufleet sweep start`) on a served fleet, its
trials table, the best trial, the curves and the metric against each parameter."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from support.servers import gpufleet, serve_env

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SWEEP = """\
name: e2e-sweep
recipe: mlp
config: {max_steps: 12, global_batch_size: 16, log_every: 3, checkpoint_every: 1000, synthetic_samples: 256}
space:
  lr: [0.05, 0.000001, 0.02, 0.00001]
  hidden: [[8]]
asha: {min_steps: 4}
parallel: 4
"""


def test_sweep_page_shows_trials_best_curves_and_params(page, server, screenshots: Path, tmp_path: Path) -> None:
    file = tmp_path / "sweep.yaml"
    file.write_text(SWEEP)
    out = subprocess.run([*gpufleet(), "sweep", "start", str(file), "--json"], capture_output=True, text=True,
                         timeout=120, env={**serve_env(server.data_dir), "GPUFLEET_SERVER": server.url})
    assert out.returncode == 0, out.stderr
    sid = json.loads(out.stdout)["id"]
    deadline = time.monotonic() + 420
    while (body := httpx.get(f"{server.url}/api/v1/sweeps/{sid}").json())["status"] == "running":
        assert time.monotonic() < deadline, body
        time.sleep(1)
    assert body["status"] == "succeeded", body

    page.goto("/")
    page.get_by_role("link", name="Sweeps").click()
    page.get_by_test_id("sweeps-table").get_by_role("link", name="e2e-sweep").first.click()
    table = page.get_by_test_id("trials-table")
    table.wait_for()
    assert table.locator("tbody tr").count() == 4
    # Which trials asynchronous halving stops depends on the order they reach the rung (the first there
    # always goes on), so the page is held to the server's answer, and the answer to what halving may do.
    states = sorted(t["state"] for t in body["trials"])
    assert set(states) <= {"complete", "pruned"} and "complete" in states, states
    assert sorted(table.locator("tbody tr td:nth-child(4)").all_inner_texts()) == states
    # A stopped trial's row says where and why: the rung its reason names, the reason itself.
    heads = table.locator("thead th").all_text_contents()
    for t in body["trials"]:
        cells = table.locator(f"tbody tr[data-trial='{t['number']}'] td").all_text_contents()
        row = dict(zip(heads, cells))
        assert row["Reason"] == t["reason"], (row, t)
        if t["state"] == "pruned":
            assert row["Rung"] == str(t["rung"]) and t["reason"].startswith(f"stopped at rung {t['rung']} "), row
            assert t["training_status"] == "pruned", t
    assert f"Best: trial {body['best']['number']}" in page.get_by_test_id("sweep-best").inner_text()
    assert page.get_by_test_id("scatter-lr").locator("circle").count() == 4
    page.get_by_test_id("sweep-curves").locator("canvas").first.wait_for()
    # Every trial's curve is whole: no line breaks where another trial has a point it lacks.
    curves = page.get_by_test_id("sweep-curves")
    assert int(curves.get_attribute("data-points")) > 1 and curves.get_attribute("data-breaks") == "0"
    page.screenshot(path=str(screenshots / "sweep-page.png"), full_page=True)
