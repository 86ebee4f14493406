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
    "dashboard_fleet.py": ["--gpus", "4", "--seconds", "1"],
    "ddp_overhead.py": ["--steps", "2", "--rounds", "1", "--no-scaling"],
    "estimate_accuracy.py": [],
    "env_build.py": ["--rounds", "1", "--packages", "2", "--modules", "2"],
    "fleet_load.py": ["--window", "1", "--sizes", "2"],
}
# Benches whose smoke run is not in place yet, each with what stands in the way. A bench leaves this
# list by getting its arguments above and passing; a new bench must name one or the other.
NOT_YET: dict[str, str] = {
    "dashboard_charts.py": "its chart.js baseline is installed by npm on demand; the smoke round is not verified",
    "estimate_burst.py": "its server did not come up within the bench's wait on a loaded machine",
    "fair_share.py": "its smoke round (--seconds 0.2) failed; not diagnosed yet",
    **{name: "smoke arguments not verified yet" for name in (
        "hetero_batches.py", "history_query.py", "ingest.py", "launch_latency.py", "log_shipping.py",
        "multi_host.py", "recommend.py", "scheduler_pass.py", "script_launch.py", "sweep.py", "ws_fanout.py")},
}


def _benches() -> list[str]:
    return sorted(p.name for p in BENCH.glob("*.py") if not p.name.startswith("_"))


def test_every_bench_has_a_smoke_run_or_says_why_not() -> None:
    assert sorted([*SMOKE, *NOT_YET]) == _benches()
    assert not set(SMOKE) & set(NOT_YET)


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
