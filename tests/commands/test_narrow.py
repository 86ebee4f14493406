"""Every command's output on an 80-column terminal: nothing runs past the edge, and it reads as words.

A real `gpufleet serve` on a simulated fleet of four idle H100s; the commands
run on a pseudo-terminal 80 columns wide (and in a pipe where that differs).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
import pytest

from gpufleet.commands.recommend import breakdown_rows
from support.servers import serve_env, serve_process
from support.terminal import in_pipe, in_terminal

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory):
    data = tmp_path_factory.mktemp("narrow") / "data"
    with serve_process(data, GPUFLEET_SIMULATE="4xH100-80GB", GPUFLEET_EMBEDDED_WORKER="false") as srv:
        env = {**os.environ, **serve_env(data, GPUFLEET_SIMULATE="4xH100-80GB"), "GPUFLEET_SERVER": srv.url}
        # The agent's first samples, so that every GPU is known to be free.
        deadline = time.monotonic() + 60
        while not all(g["live"] for g in httpx.get(f"{srv.url}/api/v1/system/gpus", timeout=10).json()["data"]):
            assert time.monotonic() < deadline
            time.sleep(0.5)
        yield srv, env


def _fits(out: str, cols: int = 80, whole: tuple[str, ...] = ()) -> None:
    over = [line for line in out.splitlines() if len(line.rstrip()) > cols and not line.lstrip().startswith(whole)]
    assert not over, "\n".join(over)


def test_recommend_fits_and_says_each_thing_once(fleet) -> None:
    _, env = fleet
    out = in_terminal(["recommend", "--recipe", "mlp"], env=env)
    _fits(out)
    assert "method: traced 3 AdamW steps" in out, out
    # Four idle, identical GPUs score the same for the same reason: one row says so.
    assert "0 | 1 | 2 | 3" in out and "4 equal choices; each has" in out, out
    ddp = in_terminal(["recommend", "--recipe", "sae", "--count", "2"], env=env)
    _fits(ddp)
    assert "gradients (DDP buckets)" in ddp and "ddp buckets" not in ddp, ddp


def test_gradients_held_in_ddp_buckets_are_one_row() -> None:
    rows = dict(breakdown_rows({"parameters": 10, "gradients": 0, "optimizer_states": 20, "ddp_buckets": 8 << 30}))
    assert rows == {"parameters": 10, "gradients (DDP buckets)": 8 << 30, "optimizer states": 20}
    # Without DDP the gradients are their own figure and there are no buckets to merge.
    rows = dict(breakdown_rows({"gradients": 5, "ddp_buckets": 0}))
    assert rows == {"gradients": 5, "ddp buckets": 0}


def test_top_topology_and_run_help_fit(fleet) -> None:
    srv, env = fleet
    top = in_terminal(["top", "--once"], env=env)
    _fits(top)
    assert top.splitlines()[0].strip() == f"gpufleet top — {srv.url}", top
    topology = in_terminal(["topology"], env=env)
    _fits(topology)
    assert "SYS  = PCIe and the link between NUMA nodes" in topology
    helped = in_terminal(["run", "--help"], env=env)
    _fits(helped)
    # An option's help starts on its own line, beside it, not a third of the width over.
    assert any(line.strip().startswith("--max-runtime") and "seconds one attempt may run" in line
               for line in helped.splitlines()), helped


def test_trainings_show_reads_as_words(fleet, tmp_path: Path) -> None:
    srv, env = fleet
    r = httpx.post(f"{srv.url}/api/v1/trainings", json={"name": "narrow", "recipe": "sae", "world_size": 2},
                   timeout=120)
    assert r.status_code == 201, r.text
    tid = r.json()["id"]
    deadline = time.monotonic() + 60
    while not httpx.get(f"{srv.url}/api/v1/trainings/{tid}", timeout=10).json()["selection"]:
        assert time.monotonic() < deadline
        time.sleep(0.3)
    out = in_terminal(["trainings", "show", tid], env=env)
    _fits(out, whole=("checkpoint",))
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert "{" not in lines["selection"] and "by recommend:" in lines["selection"], out
    assert lines["ranks"].split(None, 1)[1].rstrip() == "2, DDP", out
    # Every label ends in the same column.
    ends = {line.index(label) + len(label) for label, line in lines.items()
            if label in ("id", "name", "ranks", "selection", "memory")}
    assert len(ends) == 1, out
    # In a pipe the same lines are whole: one per field.
    piped = in_pipe(["trainings", "show", tid], env=env).stdout
    assert sum(line.strip().startswith("selection ") for line in piped.splitlines()) == 1
    assert "all pairs NVLink-connected; best fit" in piped
