"""The launcher as the jobs supervisor runs it: a subprocess with a spec file.
Failures stop every rank fast, SIGTERM checkpoints, no process outlives it."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from gpufleet.engine import exitcodes
from gpufleet.engine.recipes import get_recipe
from gpufleet.engine.trainer import Trainer

from .conftest import tiny_sae


def test_bad_config_exits_11_before_starting_ranks(launch_factory, tmp_path: Path):
    launch = launch_factory("sae", {"max_steps": 0}, ["cpu", "cpu"])
    assert launch.run(timeout=60) == exitcodes.BAD_DATA
    (err,) = launch.of_type("error")
    assert err["kind"] == "config" and "max_steps" in err["message"]
    assert launch.of_type("end")[0]["exit_code"] == exitcodes.BAD_DATA
    assert not launch.of_type("start") and not (launch.dir / "ckpt").exists()
    outside = launch_factory("sae", {"data_path": "../etc/passwd.npy"}, ["cpu"], sub="outside",
                             data_root=str(tmp_path / "data"))
    assert outside.run(timeout=60) == exitcodes.BAD_DATA
    assert "outside the data root" in outside.of_type("error")[0]["message"]


@pytest.mark.slow
@pytest.mark.parametrize("kind,code,says", [
    ("error", exitcodes.RANK_FAILED, "injected failure on rank 1 at step 5"),
    ("oom", exitcodes.OUT_OF_MEMORY, "OutOfMemoryError"),
    ("exit", exitcodes.RANK_FAILED, "exit code 3"),
])
def test_a_failing_rank_stops_the_job_within_10s(launch_factory, kind, code, says):
    cfg = tiny_sae(max_steps=100_000, log_every=5, checkpoint_every=100_000)
    launch = launch_factory("sae", cfg, ["cpu", "cpu"], env={"GPUFLEET_TRAIN_FAULT": f"1:5:{kind}"})
    assert launch.run(timeout=120) == code, launch.err
    exited = time.time()
    # Rank 0 reported step 5 just before rank 1 failed at the top of step 6.
    step5 = [s for s in launch.of_type("step") if s["step"] == 5][0]
    assert exited - step5["time"] < 10, f"took {exited - step5['time']:.1f}s to stop"
    (err,) = launch.of_type("error")
    assert err["rank"] == 1 and says in err["message"], err
    assert err["message"].startswith("rank 1")
    assert launch.of_type("end")[0]["exit_code"] == code
    assert launch.survivors() == []


@pytest.mark.slow
def test_a_hung_rank_ends_in_a_collective_timeout(launch_factory):
    cfg = tiny_sae(max_steps=100_000, log_every=5, checkpoint_every=100_000)
    launch = launch_factory("sae", cfg, ["cpu", "cpu"], env={"GPUFLEET_TRAIN_FAULT": "1:5:hang"},
                            collective_timeout_s=3.0)
    assert launch.run(timeout=120) == exitcodes.COLLECTIVE_TIMEOUT, launch.err
    step5 = [s for s in launch.of_type("step") if s["step"] == 5][0]
    (err,) = launch.of_type("error")
    assert err["kind"] == "timeout" and err["rank"] == 0
    # The configured 3 s, not PyTorch's 30-minute default.
    assert err["time"] - step5["time"] < 15
    assert launch.survivors() == []


@pytest.mark.slow
def test_sigterm_checkpoints_and_exits_then_resumes_on_one_device(launch_factory):
    cfg = tiny_sae(max_steps=100_000, log_every=5, checkpoint_every=100_000)
    launch = launch_factory("sae", cfg, ["cpu", "cpu"]).start()
    launch.wait_for(lambda recs: any(r["type"] == "step" for r in recs), timeout=120)
    pids = launch.of_type("ranks")[0]["pids"]
    launch.proc.send_signal(signal.SIGTERM)
    t0 = time.monotonic()
    assert launch.wait(timeout=60) == exitcodes.INTERRUPTED, launch.err
    assert time.monotonic() - t0 < 15
    (ck,) = launch.of_type("checkpoint")
    step = ck["step"]
    assert step % 5 == 0 and (Path(ck["path"]) / "meta.json").exists()
    end = launch.of_type("end")[0]
    assert end["exit_code"] == exitcodes.INTERRUPTED and end["step"] == step
    assert launch.survivors() == [] and all(not Path(f"/proc/{p}").exists() for p in pids)
    # The 2-rank checkpoint resumes on one device and carries on from there.
    r = get_recipe("sae")
    t = Trainer(r, r.resolve_config({**cfg, "max_steps": step + 3}), devices=["cpu"],
                checkpoint_dir=launch.spec["checkpoint_dir"])
    t.setup()
    assert t.step == step
    assert t.train().step == step + 3


def test_the_training_log_gets_a_progress_line_every_log_every_steps(launch_factory):
    launch = launch_factory("sae", tiny_sae(max_steps=6, log_every=2), ["cpu", "cpu"])
    assert launch.run(timeout=120) == exitcodes.SUCCEEDED, launch.err
    lines = [line for line in launch.out.splitlines() if line.startswith("step ")]
    assert [line.split()[1] for line in lines] == ["2/6", "4/6", "6/6"], launch.out
    for line in lines:
        words = line.split()
        assert words[2] == "loss" and float(words[3]) >= 0 and line.endswith("samples/s"), line
        assert words[3] == format(float(words[3]), ".4g"), line  # 4 significant digits
