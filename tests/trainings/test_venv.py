"""Per-training environments built with the real uv from local wheels (no network): build, reuse,
refusals, one build per key, least-recently-used eviction."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import uv

from gpufleet.engine import exitcodes as ec
from gpufleet.engine.progress import ProgressWriter
from gpufleet.trainings import venv, venvcache
from gpufleet.trainings.venv_reqs import EnvError
from support.fleet import wait_for
from support.wheels import make_wheel


@pytest.fixture
def wheelhouse(tmp_path: Path) -> Path:
    house = tmp_path / "wheels"
    make_wheel(house, "gpufleet-testdep", "1.0", {"__init__.py": "ANSWER = 42\n"})
    return house


def _request(tmp_path: Path, house: Path, requirements: str = "requirements.txt", **kw) -> venv.EnvRequest:
    return venv.EnvRequest(requirements=requirements, python=sys.executable, cache_dir=str(tmp_path / "envs"),
                           max_bytes=kw.pop("max_bytes", 10 * 2**30), uv=uv.find_uv_bin(), find_links=[str(house)],
                           no_index=True, **kw)


def _build(tmp_path: Path, req: venv.EnvRequest, reqs: str, stopped=lambda: False) -> tuple[Path, list[dict]]:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / req.requirements).write_text(reqs)
    progress = tmp_path / "progress.jsonl"
    build = venv.Build(req, work, ProgressWriter(progress), stopped)
    target = build.run()
    build.slot.release()  # the training that used it ended
    return target, [json.loads(line) for line in progress.read_text().splitlines()]


def _phases(lines: list[dict]) -> list[str]:
    return [line["phase"] for line in lines if line["type"] == "environment"]


def test_a_local_wheel_is_installed_on_top_of_the_hosts_torch_and_reused(tmp_path, wheelhouse):
    req = _request(tmp_path, wheelhouse)
    target, lines = _build(tmp_path, req, "gpufleet-testdep==1.0\ntorch\n")
    assert _phases(lines) == ["building", "ready"] and lines[-1]["cache_hit"] is False
    code = "import gpufleet_testdep, torch; print(gpufleet_testdep.ANSWER, torch.__version__, torch.__file__)"
    out = subprocess.run([str(target / "bin" / "python"), "-c", code], capture_output=True, text=True, check=True)
    answer, version, where = out.stdout.split()
    assert answer == "42" and version == torch.__version__
    assert not where.startswith(str(target))  # the host's torch, not a copy in the environment
    (tmp_path / "progress.jsonl").unlink()
    again, lines = _build(tmp_path, req, "gpufleet-testdep==1.0\ntorch\n")
    assert again == target and _phases(lines) == ["ready"] and lines[-1]["cache_hit"] is True
    assert "cache hit" in lines[-1]["message"]


def test_a_torch_the_host_does_not_have_is_refused_naming_both_versions(tmp_path, wheelhouse):
    with pytest.raises(EnvError) as exc:
        _build(tmp_path, _request(tmp_path, wheelhouse), "torch==2.99\n")
    assert "torch==2.99" in str(exc.value) and torch.__version__ in str(exc.value)
    assert not list((tmp_path / "envs").glob("*/bin"))  # refused before anything was built


def test_a_failed_build_says_what_the_resolver_said(tmp_path, wheelhouse):
    with pytest.raises(EnvError) as exc:
        _build(tmp_path, _request(tmp_path, wheelhouse), "gpufleet-nonexistent-dep\n")
    assert "gpufleet-nonexistent-dep" in str(exc.value) and "unsatisfiable" in str(exc.value)


def test_prepare_launch_fails_the_training_as_cannot_run(tmp_path, wheelhouse):
    work = tmp_path / "work"
    work.mkdir()
    (work / "requirements.txt").write_text("gpufleet-nonexistent-dep\n")
    spec = SimpleNamespace(environment=_request(tmp_path, wheelhouse).__dict__, workdir=str(work), argv=["x"], env={})
    progress = tmp_path / "p.jsonl"
    assert venv.prepare_launch(spec, ProgressWriter(progress), lambda: False) == ec.CANNOT_RUN
    err = [json.loads(x) for x in progress.read_text().splitlines() if '"error"' in x][0]
    assert err["kind"] == "environment" and "gpufleet-nonexistent-dep" in err["message"]


def test_one_build_per_key_the_second_waits_then_reuses(tmp_path, wheelhouse):
    req = _request(tmp_path, wheelhouse)
    first, _ = _build(tmp_path, req, "gpufleet-testdep\n")
    key = first.name
    holder = venvcache.Slot(tmp_path / "envs", key)
    assert holder.try_exclusive()  # as a build of the same key would hold it
    progress = tmp_path / "second.jsonl"
    result: list[Path] = []
    second = venv.Build(req, tmp_path / "work", ProgressWriter(progress), lambda: False)
    t = threading.Thread(target=lambda: result.append(second.run()))
    t.start()
    wait_for(lambda: progress.exists() and '"waiting"' in progress.read_text(), 30, "the second build to wait")
    assert not result
    holder.release()
    t.join(60)
    assert result == [first] and '"cache_hit": true' in progress.read_text()
    second.slot.release()


def test_least_recently_used_environments_go_first_and_one_in_use_stays(tmp_path, wheelhouse):
    make_wheel(wheelhouse, "gpufleet-testdep-b", "1.0")
    make_wheel(wheelhouse, "gpufleet-testdep-c", "1.0")
    big = _request(tmp_path, wheelhouse)
    a, _ = _build(tmp_path, big, "gpufleet-testdep\n")
    in_use = venvcache.Slot(tmp_path / "envs", a.name)
    assert in_use.try_shared()
    b, _ = _build(tmp_path, big, "gpufleet-testdep-b\n")
    # A budget that holds one environment: c evicts b (a is older but in use).
    c, _ = _build(tmp_path, _request(tmp_path, wheelhouse, max_bytes=1), "gpufleet-testdep-c\n")
    assert a.exists() and not b.exists() and c.exists()
    in_use.release()


def test_a_pyproject_with_its_uv_lock_installs_what_the_lock_pins(tmp_path, wheelhouse):
    make_wheel(wheelhouse, "gpufleet-testdep", "2.0", {"__init__.py": "ANSWER = 2\n"})
    work = tmp_path / "work"
    work.mkdir()
    (work / "pyproject.toml").write_text(
        '[project]\nname = "mytrain"\nversion = "0.1"\nrequires-python = ">=3.11"\n'
        'dependencies = ["gpufleet-testdep"]\n'
        f'[tool.uv]\nno-index = true\nfind-links = ["{wheelhouse}"]\n')
    subprocess.run([uv.find_uv_bin(), "lock", "--upgrade-package", "gpufleet-testdep==1.0"], cwd=work, check=True,
                   capture_output=True)
    assert 'version = "1.0"' in (work / "uv.lock").read_text()
    build = venv.Build(_request(tmp_path, wheelhouse, requirements="pyproject.toml"), work,
                       ProgressWriter(tmp_path / "p.jsonl"), lambda: False)
    target = build.run()
    build.slot.release()
    out = subprocess.run([str(target / "bin" / "python"), "-c", "import gpufleet_testdep as d; print(d.ANSWER)"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "42"  # 1.0, as locked, though 2.0 is offered
