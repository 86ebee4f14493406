"""Every bench under bench/ still runs: one short round each (its smoke arguments below), so a rename or a
changed launch spec cannot break a bench unseen. The figures come from full runs, never from here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
DB = "GPUFLEET_TEST_DATABASE_URL"
REDIS = "GPUFLEET_TEST_REDIS_URL"

# Each bench's smallest honest run: the same code paths as a full one, a few rounds of a few items.
SMOKE: dict[str, list[str]] = {
    "auth_overhead.py": ["--requests", "20"],
    "cli_start.py": ["--smoke"],
    "create_burst.py": ["--n", "4", "--reads", "2", "--workers", "1", "--limit-s", "120"],
    "dashboard_charts.py": ["--gpus", "4", "--points", "10", "--ticks", "3"],
    "dashboard_fleet.py": ["--gpus", "4", "--seconds", "1"],
    "ddp_overhead.py": ["--steps", "2", "--rounds", "1", "--no-scaling"],
    "env_build.py": ["--rounds", "1", "--packages", "2", "--modules", "2"],
    "estimate_burst.py": ["--seconds", "1"],
    "fair_share.py": ["--seconds", "0.2"],
    "fleet_load.py": ["--window", "1", "--sizes", "2"],
    "hetero_batches.py": ["--steps", "4", "--global-batch", "64", "--checkpoint-every", "2", "--rounds", "1"],
    "history_query.py": [],
    "ingest.py": ["--rows", "1000", "--repeat", "1"],
    "launch_latency.py": ["--rounds", "1"],
    "log_shipping.py": ["--seconds", "1", "--lines-per-s", "50"],
    "multi_host.py": ["--steps", "4", "--rounds", "1"],
    "recommend.py": ["--iterations", "3", "--hosts", "2"],
    "scheduler_pass.py": ["--hosts", "5", "--queued", "20", "--rounds", "1"],
    "script_launch.py": ["--rounds", "1"],
    "sweep.py": ["--gpus", "2", "--lrs", "2", "--widths", "1", "--steps", "4", "--min-steps", "2"],
    "ws_fanout.py": ["--clients", "5", "--seconds", "1"],
}


def _benches() -> list[str]:
    return sorted(p.name for p in BENCH.glob("*.py") if not p.name.startswith("_"))


def test_every_bench_has_a_smoke_run() -> None:
    assert sorted(SMOKE) == _benches()


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.parametrize("bench", sorted(SMOKE))
def test_the_bench_runs_its_smoke_round(bench: str, tmp_path: Path) -> None:
    if not (os.environ.get(DB) and os.environ.get(REDIS)):
        pytest.fail(f"{DB} and {REDIS} must name the test services (scripts/test.sh starts them)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_") or k in (DB, REDIS)}
    env.update(GPUFLEET_BENCH_DATABASE_URL=os.environ[DB], TMPDIR=str(tmp_path))
    out = subprocess.run([sys.executable, str(BENCH / bench), *SMOKE[bench]], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=400)
    assert out.returncode == 0, f"{bench} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    assert out.stdout.strip(), f"{bench} printed nothing"
