"""A script's own packages, its deterministic failures and its GPUs, end to end: `gpufleet run`, a
real server, scheduler, Celery worker, uv and rank processes (simulated GPUs: the ranks run on CPU).

The package index is a folder of wheels written here (no network): the worker's settings point
find-links at it with no index, as on an air-gapped box.
"""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest

from support.fleet import make_settings, register
from trainings.test_script_worker import _run_cli, _submitted_id, _wait
from support.wheels import make_wheel

pytestmark = pytest.mark.slow
FINAL = ("succeeded", "failed", "cancelled", "reclaimed")

USES_DEP = '''\
import gpufleet_testdep
from gpufleet_report import report
for step in range(1, 4):
    report(step, loss=1.0 / step, answer=gpufleet_testdep.ANSWER)
print("answer", gpufleet_testdep.ANSWER, flush=True)
'''


@pytest.fixture
def server(tmp_path, workers, scheduler, live_server):
    house = tmp_path / "wheels"
    make_wheel(house, "gpufleet-testdep", "1.0", {"__init__.py": "ANSWER = 42\n"})
    # An interpreter with torch and without gpufleet (the worker's runs from a venv that has it).
    bare = str(Path(sys.base_prefix) / "bin" / "python3")
    settings = make_settings(tmp_path, "sqlite", env_find_links=[str(house)], env_no_index=True,
                             pythons={"bare": bare})
    register(settings)
    workers(settings)
    scheduler(settings)
    return live_server(settings)


def _project(root: Path, script: str, requirements: str | None = None) -> Path:
    root.mkdir(parents=True)
    (root / "train.py").write_text(script)
    if requirements is not None:
        (root / "requirements.txt").write_text(requirements)
    return root


def _submit(base: str, project: Path, *args: str) -> str:
    res = _run_cli(base, project, "--no-follow", *args)
    assert res.returncode == 0, res.stdout + res.stderr
    return _submitted_id(res.stdout)


def _events(base: str, tid: str) -> list[dict]:
    return httpx.get(f"{base}/api/v1/trainings/{tid}/events", timeout=30).json()["data"]


def _env_events(base: str, tid: str) -> list[str]:
    return [e["reason"] for e in _events(base, tid) if e["kind"] == "environment"]


def test_requirements_from_a_local_wheel_are_built_once_and_reused(tmp_path, server):
    base = server
    project = _project(tmp_path / "proj", USES_DEP, "gpufleet-testdep==1.0\n")
    first = _submit(base, project, "--", "python", "train.py")
    body = _wait(base, first, FINAL, 300)
    assert body["status"] == "succeeded", body["status_reason"]
    reasons = _env_events(base, first)
    assert any(r.startswith("building environment (key ") for r in reasons), reasons
    assert any("environment ready" in r and "(built)" in r for r in reasons), reasons
    log = httpx.get(f"{base}/api/v1/trainings/{first}/logs", params={"offset": 0}, timeout=30).json()["text"]
    assert "[env] " in log and "gpufleet-testdep==1.0" in log  # uv's own output is in the training's log
    metrics = httpx.get(f"{base}/api/v1/trainings/{first}/metrics", timeout=30).json()["data"]
    assert [m["step"] for m in metrics] == [1, 2, 3]  # gpufleet_report's lines reached the training's metrics
    assert metrics[-1]["metrics"]["answer"] == 42
    second = _submit(base, project, "--", "python", "train.py")
    body = _wait(base, second, FINAL, 300)
    assert body["status"] == "succeeded", body["status_reason"]
    reasons = _env_events(base, second)
    assert any("environment ready" in r and "(cache hit)" in r for r in reasons), reasons
    assert not any(r.startswith("building environment") for r in reasons)


def test_a_build_that_cannot_resolve_and_an_import_error_fail_at_once(tmp_path, server):
    base = server
    broken = _project(tmp_path / "broken", "print('never runs')\n", "gpufleet-testdep==9.9\n")
    missing = _project(tmp_path / "missing", "import tqdm_that_is_not_installed\n")
    refused = _project(tmp_path / "refused", "print('never runs')\n", "torch==2.99\n")
    ids = {name: _submit(base, proj, "--max-restarts", "3", "--", "python", "train.py")
           for name, proj in (("broken", broken), ("missing", missing), ("refused", refused))}
    bodies = {name: _wait(base, tid, FINAL, 300) for name, tid in ids.items()}
    for name, body in bodies.items():
        assert body["status"] == "failed" and body["restarts"] == 0 and body["exit_code"] == 15, (name, body)
    assert "gpufleet-testdep" in bodies["broken"]["status_reason"]
    assert "cannot build the environment" in bodies["broken"]["status_reason"]
    assert "ModuleNotFoundError: No module named 'tqdm_that_is_not_installed'" in bodies["missing"]["status_reason"]
    assert "torch==2.99" in bodies["refused"]["status_reason"]
    assert not any(e["kind"] == "retry" for tid in ids.values() for e in _events(base, tid))


def test_no_memory_means_a_whole_gpu_and_report_works_without_gpufleet(tmp_path, server):
    base = server
    script = '''\
import importlib.util, sys
assert importlib.util.find_spec("gpufleet") is None, "this interpreter should not have gpufleet"
from gpufleet_report import report
for step in range(1, 4):
    report(step, loss=2.0 / step)
'''
    project = _project(tmp_path / "bare", script)
    tid = _submit(base, project, "--python", "bare", "--", "python", "train.py")
    body = _wait(base, tid, FINAL, 300)
    assert body["status"] == "succeeded", body["status_reason"]
    assert body["estimate"]["source"] == "whole-gpu" and body["exclusive"] and len(body["gpu_ids"]) == 1
    assert body["measured_peak_memory"]  # kept: the next run of the same code is sized by it
    rows = httpx.get(f"{base}/api/v1/trainings/{tid}/metrics", timeout=30).json()["data"]
    assert [(m["step"], m["loss"]) for m in rows] == [(1, 2.0), (2, 1.0), (3, 2.0 / 3)]
