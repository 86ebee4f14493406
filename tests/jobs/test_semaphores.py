"""A launcher group killed with SIGKILL leaves no semaphores in /dev/shm once cleaned up."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from gpufleet.jobs import procs

from support.fleet import TINY_SAE, wait_for

pytestmark = pytest.mark.slow


def _semaphores_of(pgid: int) -> set[str]:
    """Named semaphores (still linked in /dev/shm) that processes of the group have open."""
    names = set()
    for pid in procs.group_members(pgid):
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue
        names.update(line.split("/dev/shm/")[1].split()[0] for line in maps.splitlines()
                     if "/dev/shm/sem." in line and not line.endswith("(deleted)"))
    return {n for n in names if (Path("/dev/shm") / n).exists()}


def _start(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    progress = tmp_path / "progress.jsonl"
    spec = {"recipe": "sae", "config": dict(TINY_SAE, max_steps=1_000_000, checkpoint_every=1_000_000),
            "devices": ["cuda:0", "cuda:1"], "ranks_on_cpu": True, "checkpoint_dir": str(tmp_path / "ckpt"),
            "progress_file": str(progress)}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    proc = subprocess.Popen([sys.executable, "-m", "gpufleet.engine.launch", str(tmp_path / "spec.json")],
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, progress


@pytest.mark.parametrize("how", ["supervisor_kill", "orphan_cleanup"])
def test_killed_launcher_group_leaves_no_semaphores(tmp_path, sim_settings, how):
    proc, progress = _start(tmp_path)
    try:
        wait_for(lambda: progress.exists() and '"type": "step"' in progress.read_text(), 120, "the first step")
        before = wait_for(lambda: _semaphores_of(proc.pid), 30, "the ranks' semaphores")
        if how == "supervisor_kill":
            procs.stop_group(proc.pid, 0.0)  # what the supervisor does past a grace
        else:
            # The worker and its launcher group died together (out of memory, a crash);
            # the next worker of this host cleans up what they left.
            procs.write_pidfile(sim_settings, sim_settings.host_name, uuid.uuid4(), proc.pid, "w")
            os.killpg(proc.pid, signal.SIGKILL)
            wait_for(lambda: not procs.group_members(proc.pid), 10, "the group to die")
            wait_for(lambda: procs.kill_orphans(sim_settings, sim_settings.host_name) is not None
                     and not [n for n in before if (Path("/dev/shm") / n).exists()], 30, "the orphan cleanup", 0.5)
        proc.wait(10)
        left = [n for n in before if (Path("/dev/shm") / n).exists()]
        assert left == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def test_a_semaphore_its_creator_still_holds_is_never_swept():
    # The creator maps the semaphore under the temporary name glibc made it with
    # ("/dev/shm/sem.XXXXXX (deleted)"), not under sem.mp-…: a sweep that went by
    # names took live semaphores from trainings still starting their ranks.
    import multiprocessing

    lock = multiprocessing.get_context("spawn").Lock()
    path = Path("/dev/shm") / ("sem." + lock._semlock.name.lstrip("/"))
    assert path.exists()
    removed = procs.sweep_semaphores(min_age_s=0.0)
    assert path.name not in removed and path.exists()
    with lock:  # still usable
        pass
