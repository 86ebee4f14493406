"""The device backend: chosen once per fleet, and the only place that knows whether GPUs are simulated."""

from __future__ import annotations

import ast
import subprocess
import sys
import uuid
from pathlib import Path

import pynvml
import pytest
from gpufleet.devices.backend import device_backend
from gpufleet.devices.native import NativeBackend
from gpufleet.devices import simmemory
from gpufleet.devices.simulated import SimulatedBackend

PACKAGE = Path(__file__).resolve().parents[2] / "backend" / "gpufleet"


@pytest.fixture
def child():
    # A real process to stand for a training's launcher (entries of dead pids are ignored).
    # It says when it is up, so its memory (which the simulator reads) no longer grows while a test reads it.
    p = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "up"
    yield p
    p.kill()
    p.wait()


def test_settings_choose_the_backend_once_per_fleet(settings, make_sim):
    real = device_backend(settings)
    assert isinstance(real, NativeBackend) and real.nvml is pynvml and not real.simulated
    assert real.description is None
    a = make_sim("2xH100-80GB", "pcie")
    sim = device_backend(a)
    assert isinstance(sim, SimulatedBackend) and sim.simulated
    assert sim.description == "simulated: 2xH100-80GB, pcie"
    # One object per fleet, so the simulated NVML's init count is shared like the module's.
    assert device_backend(a) is sim and device_backend(a).nvml is sim.nvml
    assert device_backend(make_sim("2xH100-80GB", "pcie")) is not sim  # another state dir: another fleet


def test_only_simulated_gpus_send_their_ranks_to_the_cpu(settings, make_sim):
    sim = device_backend(make_sim("2xH100-80GB"))
    assert sim.ranks_run_on_cpu(["cuda:0", "cuda:1"])
    assert not sim.ranks_run_on_cpu(["cpu"]) and not sim.ranks_run_on_cpu([])
    assert not device_backend(settings).ranks_run_on_cpu(["cuda:0", "cuda:1"])


def test_a_started_training_shows_on_its_simulated_gpus_until_it_ends(make_sim, child):
    s = make_sim("2xH100-80GB+1xMI300X")
    backend = device_backend(s)
    tid = str(uuid.uuid4())
    backend.training_started([0, 2], child.pid, tid, None)
    n = backend.nvml
    n.nvmlInit()
    try:
        (p,) = n.nvmlDeviceGetComputeRunningProcesses(n.nvmlDeviceGetHandleByIndex(0))
        # Modeled as a rank's process: the context plus what the process holds (devices/simmemory.py).
        assert (p.pid, p.usedGpuMemory) == (child.pid, s.sim_context_mb * 2**20 + simmemory.reserved(child.pid, 0))
        assert n.nvmlDeviceGetComputeRunningProcesses(n.nvmlDeviceGetHandleByIndex(1)) == []
        note = backend.process_note(0, child.pid)
        assert note is not None and note.training_id == tid and note.command == "gpufleet-train"
        assert backend.process_note(2, child.pid) == note  # the AMD GPU too
        assert backend.process_note(1, child.pid) is None
        backend.training_ended(child.pid)
        assert n.nvmlDeviceGetComputeRunningProcesses(n.nvmlDeviceGetHandleByIndex(0)) == []
        assert backend.process_note(0, child.pid) is None
    finally:
        n.nvmlShutdown()


def test_a_sessions_simulated_gpu_idles_until_a_training_runs_beside_it(make_sim, child):
    """A session's process holds its GPU and runs nothing, as a shell or an idle notebook does on a real one:
    low utilisation and power, so the idle rule can be seen on a simulated fleet."""
    backend = device_backend(make_sim("2xH100-80GB"))
    backend.training_started([0], child.pid, str(uuid.uuid4()), 2**30, busy=False)
    backend.training_started([1], child.pid, str(uuid.uuid4()), 2**30)
    n = backend.nvml
    n.nvmlInit()
    try:
        idle, busy = (n.nvmlDeviceGetHandleByIndex(i) for i in (0, 1))
        assert len(n.nvmlDeviceGetComputeRunningProcesses(idle)) == 1  # it holds the GPU and its memory
        assert n.nvmlDeviceGetUtilizationRates(idle).gpu == 0
        limit = n.nvmlDeviceGetPowerManagementLimit(idle)
        assert n.nvmlDeviceGetPowerUsage(idle) <= 0.15 * limit
        assert n.nvmlDeviceGetUtilizationRates(busy).gpu >= 70 and n.nvmlDeviceGetPowerUsage(busy) > 0.5 * limit
        assert backend.process_note(0, child.pid).command == "gpufleet-session"
    finally:
        backend.training_ended(child.pid)
        n.nvmlShutdown()


def test_a_broken_simulated_state_never_stops_a_training(make_sim, child, caplog):
    backend = device_backend(make_sim("1xH100-80GB"))
    backend.training_started([-1], child.pid, "t", 2**30)  # refused by the state: logged, not raised
    assert "could not register training t" in caplog.text
    backend.training_ended(child.pid)


def test_real_drivers_note_nothing_and_record_nothing(settings, child):
    real = device_backend(settings)
    real.training_started([0], child.pid, "t", None)
    real.training_ended(child.pid)
    assert real.process_note(0, child.pid) is None


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return found


def test_jobs_and_telemetry_never_ask_whether_the_fleet_is_simulated():
    simulator = {"simstate", "simnvml", "simamdsmi", "simxpusmi", "simspecs", "simulated", "native",
                 "simmetrics", "simevents"}
    offenders = []
    for folder in ("jobs", "telemetry"):
        for path in sorted((PACKAGE / folder).glob("*.py")):
            text = path.read_text()
            if "settings.simulate" in text:
                offenders.append(f"{path.name}: reads settings.simulate")
            for name in _imports(path):
                if name.startswith("gpufleet.devices.") and name.split(".")[2] in simulator:
                    offenders.append(f"{path.name}: imports {name}")
    assert offenders == []


def test_the_devices_package_never_imports_itself_through_its_init():
    offenders = [
        f"{path.name}: {name}"
        for path in sorted((PACKAGE / "devices").glob("*.py")) if path.name != "__init__.py"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module == "gpufleet.devices"
        for name in [", ".join(a.name for a in node.names)]
    ]
    assert offenders == []
