"""Every bench under bench/ still runs: one short round each (its smoke arguments below), so a rename or a
changed launch spec cannot break a bench unseen; the slowest ones on demand. The figures come from full
runs, never from here."""

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
    "ckpt_upload.py": ["--mb", "8", "--files", "2", "--rounds", "1", "--steps", "20"],
    "cli_start.py": ["--smoke"],
    "create_burst.py": ["--n", "4", "--reads", "2", "--workers", "1", "--limit-s", "120"],
    "dashboard_fleet.py": ["--gpus", "4", "--seconds", "1"],
    "ddp_overhead.py": ["--steps", "2", "--rounds", "1", "--no-scaling"],
    "estimate_accuracy.py": [],
    "env_build.py": ["--rounds", "1", "--packages", "2", "--modules", "2"],
    "fair_share.py": ["--seconds", "0.2"],
    "fleet_load.py": ["--window", "1", "--sizes", "2"],
    "history_query.py": ["--hours", "1", "--rounds", "1"],
    "ingest.py": ["--rows", "2000", "--repeat", "1"],
    "log_shipping.py": ["--lines-per-s", "100", "--seconds", "1"],
    "recommend.py": ["--hosts", "2", "--iterations", "3"],
    "scheduler_pass.py": ["--hosts", "4", "--queued", "20", "--rounds", "1"],
    "ws_fanout.py": ["--clients", "10", "--seconds", "1"],
}
# Benches whose short round is too slow for CI: each starts real ranks, launchers or a server, and together
# they would add about 7 minutes to a suite that has none to spare. Their rounds are checked on demand
# (GPUFLEET_TEST_SLOW_BENCHES=1, below); the seconds are what one took on the 2-core CI machine.
SLOW: dict[str, tuple[list[str], int]] = {
    "estimate_burst.py": (["--seconds", "1", "--requests", "2", "--budget", "1"], 49),
    "hetero_batches.py": (["--steps", "10", "--global-batch", "64", "--width", "16", "--rounds", "1"], 57),
    "launch_latency.py": (["--rounds", "1", "--ranks", "2"], 56),
    "multi_host.py": (["--steps", "20", "--warmup", "0", "--rounds", "1"], 78),
    "script_launch.py": (["--rounds", "1"], 58),
    "sweep.py": (["--lrs", "2", "--widths", "1", "--steps", "4", "--min-steps", "2", "--gpus", "2"], 90),
    "share.py": (["--steps", "2"], 170),
}
# A bench's other modes, each with its own short round in CI (a bench named here runs its default mode above too).
MODES: dict[str, tuple[str, list[str]]] = {
    # A member's sandboxed script trial, cold vs warm (about 25 s): as root, with bubblewrap.
    "launch_latency.py --script --member": ("launch_latency.py", ["--script", "--member", "--rounds", "1",
                                                                  "--ranks", "2"]),
}
# Benches with no short round yet, each with what stands in the way. A bench leaves this list by getting
# its arguments above and passing; a new bench must name one or the other.
NOT_YET: dict[str, str] = {
    "dashboard_charts.py": "its Chart.js baseline is not a dashboard dependency and is installed by npm on demand",
}


def _benches() -> list[str]:
    return sorted(p.name for p in BENCH.glob("*.py") if not p.name.startswith("_"))


def test_every_bench_has_a_smoke_run_or_says_why_not() -> None:
    assert sorted([*SMOKE, *SLOW, *NOT_YET]) == _benches()
    assert len({*SMOKE, *SLOW, *NOT_YET}) == len(SMOKE) + len(SLOW) + len(NOT_YET)


def _smoke(bench: str, args: list[str], tmp_path: Path) -> None:
    if not (os.environ.get(DB) and os.environ.get(REDIS)):
        pytest.fail(f"{DB} and {REDIS} must name the test services (scripts/test.sh starts them)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_") or k in (DB, REDIS)}
    env.update(GPUFLEET_BENCH_DATABASE_URL=os.environ[DB], TMPDIR=str(tmp_path))
    out = subprocess.run([sys.executable, str(BENCH / bench), *args], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=400)
    assert out.returncode == 0, f"{bench} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    assert out.stdout.strip(), f"{bench} printed nothing"


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.parametrize("bench", sorted(SMOKE))
def test_the_bench_runs_its_smoke_round(bench: str, tmp_path: Path) -> None:
    _smoke(bench, SMOKE[bench], tmp_path)


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.skipif(os.environ.get("GPUFLEET_TEST_SLOW_BENCHES") != "1",
                    reason="a slow bench's round is run on demand: GPUFLEET_TEST_SLOW_BENCHES=1")
@pytest.mark.parametrize("bench", sorted(SLOW))
def test_the_slow_bench_runs_its_short_round(bench: str, tmp_path: Path) -> None:
    _smoke(bench, SLOW[bench][0], tmp_path)


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.parametrize("mode", sorted(MODES))
def test_a_benchs_other_mode_runs_its_round(mode: str, tmp_path: Path) -> None:
    from gpufleet.jobs import sandbox

    if os.geteuid() != 0 or sandbox.bwrap_path() is None:
        pytest.skip("a member's sandbox needs root and bubblewrap (CI has both)")
    bench, args = MODES[mode]
    _smoke(bench, args, tmp_path)
