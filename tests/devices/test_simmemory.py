"""A simulated GPU shows a training's rank as a real one would: its context plus
the memory the rank's process holds, never shrinking while it lives."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from gpufleet.config import load_settings
from gpufleet.devices.backend import device_backend

MiB = 2**20

RANK = """
import sys
held = []
for line in sys.stdin:
    if line.strip() == "grow":
        held.append(bytearray(300 * 2**20))
    elif line.strip() == "free":
        held.clear()
    print("ok", flush=True)
"""


@pytest.fixture
def rank():
    proc = subprocess.Popen([sys.executable, "-c", RANK], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    yield proc
    proc.kill()
    proc.wait()


def _say(proc: subprocess.Popen, word: str) -> None:
    proc.stdin.write(word + "\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "ok"


def _used(backend, pid: int) -> int:
    n = backend.nvml
    n.nvmlInit()
    try:
        procs = n.nvmlDeviceGetComputeRunningProcesses(n.nvmlDeviceGetHandleByIndex(0))
        return sum(p.usedGpuMemory for p in procs if p.pid == pid)
    finally:
        n.nvmlShutdown()


def test_rank_memory_is_context_plus_what_it_holds_and_never_shrinks(tmp_path, rank) -> None:
    s = load_settings(data_dir=tmp_path / "d", simulate="1xH100-80GB", host_name="sim-mem", sim_context_mb=700)
    backend = device_backend(s)
    backend.training_started([0], rank.pid, str(uuid.uuid4()), 10 * MiB)
    _say(rank, "hello")
    first = _used(backend, rank.pid)
    assert 700 * MiB < first < 700 * MiB + 200 * MiB  # an interpreter, not the 10 MiB estimate
    _say(rank, "grow")
    grown = _used(backend, rank.pid)
    assert grown >= first + 290 * MiB
    _say(rank, "free")
    # A caching allocator keeps what it reserved (the kernel syncs RSS counters lazily: within 1 MiB).
    assert _used(backend, rank.pid) >= grown - MiB
    backend.training_ended(rank.pid)


def test_the_context_is_a_setting_and_the_backend_reports_it(tmp_path) -> None:
    s = load_settings(data_dir=tmp_path / "d", simulate="2xH100-80GB", host_name="sim-ctx", sim_context_mb=1234)
    backend = device_backend(s)
    assert backend.context_bytes(backend.detect_gpus()) == {0: 1234 * MiB, 1: 1234 * MiB}
