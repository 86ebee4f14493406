"""What every launcher shares at its start (engine/lifeline.start_launcher), on real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpufleet.engine import exitcodes

LAUNCHERS = ["gpufleet.engine.launch", "gpufleet.trainings.script_launch", "gpufleet.interactive.launch"]

# A launcher's start, then a long wait: only its lifeline ends it.
HOLD = """
import os, sys, time
from pathlib import Path
from gpufleet.engine.lifeline import start_launcher
Path(sys.argv[1]).write_text(str(os.getpid()))
spec = start_launcher(sys.argv[2:], "hold")
print("spec", spec, flush=True)
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purpose; its parent has not reaped it yet.
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("module", LAUNCHERS)
@pytest.mark.parametrize("argv", [[], ["a.json", "b.json"], ["a.json", "--parent-fd", "x"]])
def test_a_launcher_called_wrongly_says_its_usage(module, argv):
    out = subprocess.run([sys.executable, "-m", module, *argv], capture_output=True, text=True, timeout=120)
    assert out.returncode == exitcodes.LAUNCHER_ERROR
    assert f"usage: python -m {module} SPEC.json [--parent-fd N]" in out.stderr


def test_a_launcher_exits_once_its_workers_pipe_closes(tmp_path):
    read, write = os.pipe()
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / "pid"), "spec.json", "--parent-fd", str(read)],
                            pass_fds=(read,), stdout=subprocess.PIPE, text=True)
    os.close(read)
    try:
        assert proc.stdout.readline().strip() == "spec spec.json"
        assert proc.poll() is None  # the pipe is open: it holds
        os.close(write)  # the worker is gone, however it died
        assert proc.wait(timeout=30) == exitcodes.INTERRUPTED
    finally:
        proc.kill()
        proc.wait()


def test_a_launcher_dies_with_the_process_that_started_it(tmp_path):
    pid_file = tmp_path / "pid"
    # The worker starts the launcher, waits until the launcher is tied to it, then dies before it.
    worker = (f"import subprocess, sys\n"
              f"p = subprocess.Popen([sys.executable, '-c', {HOLD!r}, {str(pid_file)!r}, 'spec.json'],"
              f" stdout=subprocess.PIPE, text=True)\n"
              f"assert p.stdout.readline().strip() == 'spec spec.json'\n")
    subprocess.run([sys.executable, "-c", worker], timeout=120, check=True)
    launcher = int(pid_file.read_text())
    assert _gone_within(launcher, 30), "the launcher outlived the worker that started it"
