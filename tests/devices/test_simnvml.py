"""The simulated NVML behaves like pynvml: names, shapes, errors, and state shared across processes."""

from __future__ import annotations

import inspect
import multiprocessing as mp
import os
import subprocess
import sys
import time

import pynvml
import pytest

from gpufleet.devices import simstate
from gpufleet.devices.backend import device_backend
from gpufleet.devices.simnvml import SimNVML

GIB = 1024**3


def test_real_settings_give_real_pynvml(settings):
    assert device_backend(settings).nvml is pynvml


def test_every_simulated_function_has_pynvmls_signature():
    checked = 0
    for name, fn in inspect.getmembers(SimNVML, inspect.isfunction):
        if not name.startswith("nvml") or name == "nvmlDeviceGetNvLinkRemotePciInfo_v2":
            continue  # _v2 is the C symbol pynvml calls under the plain name
        real = getattr(pynvml, name)
        assert list(inspect.signature(inspect.unwrap(real)).parameters) == list(
            inspect.signature(fn).parameters
        )[1:], name
        checked += 1
    assert checked >= 35


def test_init_is_counted_like_nvml(sim_settings):
    n = device_backend(sim_settings).nvml
    assert device_backend(sim_settings).nvml is n  # one library per fleet, like the module
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        n.nvmlDeviceGetCount()
    n.nvmlInit()
    n.nvmlInit()
    n.nvmlShutdown()
    assert n.nvmlDeviceGetCount() == 4
    n.nvmlShutdown()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        n.nvmlShutdown()


def test_identity_and_struct_shapes(nvml):
    h = nvml.nvmlDeviceGetHandleByIndex(1)
    assert nvml.nvmlDeviceGetName(h) == "NVIDIA H100 80GB HBM3"
    assert nvml.nvmlDeviceGetUUID(h).startswith("GPU-")
    pci = nvml.nvmlDeviceGetPciInfo(h)
    assert isinstance(pci, pynvml.nvmlPciInfo_t) and pci.busId == "00000000:2A:00.0" and pci.bus == 0x2A
    assert nvml.nvmlDeviceGetHandleByPciBusId(pci.busId) == h
    assert nvml.nvmlDeviceGetHandleByUUID(nvml.nvmlDeviceGetUUID(h)) == h
    assert nvml.nvmlDeviceGetCudaComputeCapability(h) == (9, 0)
    mem = nvml.nvmlDeviceGetMemoryInfo(h)
    assert mem.total == 80 * GIB and mem.used + mem.free == mem.total and mem.used < 64 * 2**20
    util = nvml.nvmlDeviceGetUtilizationRates(h)
    assert (util.gpu, util.memory) == (0, 0)
    assert nvml.nvmlDeviceGetEnforcedPowerLimit(h) == 700_000
    assert nvml.nvmlDeviceGetPowerUsage(h) < 100_000  # idle
    assert nvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU) < 40
    assert nvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM) == 2619
    assert nvml.nvmlDeviceGetComputeRunningProcesses(h) == []
    assert nvml.nvmlSystemGetDriverVersion().count(".") == 2
    # Constants and error classes are pynvml's own objects.
    assert nvml.NVMLError_NotSupported is pynvml.NVMLError_NotSupported
    assert nvml.NVML_NVLINK_MAX_LINKS == pynvml.NVML_NVLINK_MAX_LINKS
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceGetHandleByIndex(4)


def test_unsimulated_and_unknown_names(nvml):
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        nvml.nvmlDeviceGetFanSpeed(h)
    with pytest.raises(AttributeError):
        nvml.nvmlDeviceGetWarpDrive(h)


def test_processes_drive_memory_and_utilization(nvml, sim_settings):
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    me = os.getpid()
    simstate.register_process(sim_settings, 0, me, 10 * GIB, "gpufleet-rank0", training_id="t-1")
    stranger = simstate.add_foreign_process(sim_settings, 0, 2 * GIB, user="bob", name="jupyter")
    procs = {p.pid: p.usedGpuMemory for p in nvml.nvmlDeviceGetComputeRunningProcesses(h)}
    assert procs == {me: 10 * GIB, stranger: 2 * GIB}
    mem = nvml.nvmlDeviceGetMemoryInfo(h)
    assert 12 * GIB <= mem.used < 12 * GIB + 64 * 2**20 and mem.free == mem.total - mem.used
    util = nvml.nvmlDeviceGetUtilizationRates(h).gpu
    assert 80 <= util <= 100
    assert nvml.nvmlDeviceGetTemperature(h, 0) > 60
    assert nvml.nvmlDeviceGetPowerUsage(h) > 400_000
    assert nvml.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_TX_BYTES) >= 150_000
    idle = nvml.nvmlDeviceGetHandleByIndex(3)
    assert nvml.nvmlDeviceGetPcieThroughput(idle, pynvml.NVML_PCIE_UTIL_RX_BYTES) < 200
    assert nvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM) > nvml.nvmlDeviceGetClockInfo(idle,
                                                                                            pynvml.NVML_CLOCK_SM)
    assert nvml.nvmlSystemGetProcessName(stranger) == "jupyter"
    assert simstate.describe_process(sim_settings, stranger).user == "bob"
    assert simstate.describe_process(sim_settings, me).training_id == "t-1"
    # The other GPUs are untouched.
    assert nvml.nvmlDeviceGetUtilizationRates(nvml.nvmlDeviceGetHandleByIndex(1)).gpu == 0
    # Registering again updates; removing frees the memory.
    simstate.register_process(sim_settings, 0, me, 1 * GIB)
    simstate.remove_foreign_process(sim_settings, stranger)
    assert [p.usedGpuMemory for p in nvml.nvmlDeviceGetComputeRunningProcesses(h)] == [1 * GIB]
    simstate.unregister_process(sim_settings, 0, me)
    assert nvml.nvmlDeviceGetComputeRunningProcesses(h) == []
    assert nvml.nvmlDeviceGetUtilizationRates(h).gpu == 0
    graphics = simstate.add_foreign_process(sim_settings, 0, GIB, kind="graphics", name="Xorg")
    assert [p.pid for p in nvml.nvmlDeviceGetGraphicsRunningProcesses(h)] == [graphics]
    assert nvml.nvmlDeviceGetComputeRunningProcesses(h) == []


def test_an_idle_gpu_keeps_its_memory_and_reads_no_utilization(nvml, sim_settings):
    me = os.getpid()
    simstate.register_process(sim_settings, 0, me, 10 * GIB, "gpufleet-rank0", training_id="t-1")
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    assert nvml.nvmlDeviceGetUtilizationRates(h).gpu > 50
    simstate.set_idle(sim_settings, 0)
    assert nvml.nvmlDeviceGetUtilizationRates(h).gpu == 0
    assert nvml.nvmlDeviceGetMemoryInfo(h).used >= 10 * GIB
    assert nvml.nvmlDeviceGetUtilizationRates(nvml.nvmlDeviceGetHandleByIndex(1)).gpu == 0  # no process there
    simstate.set_idle(sim_settings, 0, idle=False)
    assert nvml.nvmlDeviceGetUtilizationRates(h).gpu > 50
    with pytest.raises(ValueError):
        simstate.set_idle(sim_settings, -1)


def test_exited_gpufleet_process_is_ignored(nvml, sim_settings):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        simstate.register_process(sim_settings, 2, child.pid, 5 * GIB)
        h = nvml.nvmlDeviceGetHandleByIndex(2)
        assert [p.pid for p in nvml.nvmlDeviceGetComputeRunningProcesses(h)] == [child.pid]
    finally:
        child.kill()
        child.wait()
    assert nvml.nvmlDeviceGetComputeRunningProcesses(h) == []
    assert nvml.nvmlDeviceGetMemoryInfo(h).used < GIB


@pytest.mark.parametrize(
    ("field", "call", "reason", "error"),
    [
        ("temperature", lambda n, h: n.nvmlDeviceGetTemperature(h, 0), "not_supported", pynvml.NVMLError_NotSupported),
        ("power", lambda n, h: n.nvmlDeviceGetPowerUsage(h), "no_permission", pynvml.NVMLError_NoPermission),
        ("processes", lambda n, h: n.nvmlDeviceGetComputeRunningProcesses(h), "no_permission",
         pynvml.NVMLError_NoPermission),
        ("memory", lambda n, h: n.nvmlDeviceGetMemoryInfo(h), "unknown", pynvml.NVMLError_Unknown),
        ("clocks", lambda n, h: n.nvmlDeviceGetClockInfo(h, 1), "not_supported", pynvml.NVMLError_NotSupported),
    ],
)
def test_refused_field_raises_the_named_nvml_error(nvml, sim_settings, field, call, reason, error):
    h = nvml.nvmlDeviceGetHandleByIndex(3)
    call(nvml, h)  # fine before
    simstate.refuse_field(sim_settings, 3, field, reason)
    with pytest.raises(error) as info:
        call(nvml, h)
    assert info.value.value == getattr(pynvml, "NVML_ERROR_" + reason.upper())
    call(nvml, nvml.nvmlDeviceGetHandleByIndex(2))  # only GPU 3 refuses
    simstate.allow_field(sim_settings, 3, field)
    call(nvml, h)


def test_refuse_field_rejects_bad_names(sim_settings):
    with pytest.raises(ValueError, match="unknown field"):
        simstate.refuse_field(sim_settings, 0, "fan", "not_supported")
    with pytest.raises(ValueError, match="unknown NVML error"):
        simstate.refuse_field(sim_settings, 0, "temperature", "broken")
    with pytest.raises(ValueError, match="gpu_index"):
        simstate.lose_gpu(sim_settings, -1)


def test_lost_gpu(nvml, sim_settings):
    h = nvml.nvmlDeviceGetHandleByIndex(1)
    simstate.lose_gpu(sim_settings, 1)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        nvml.nvmlDeviceGetHandleByIndex(1)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        nvml.nvmlDeviceGetMemoryInfo(h)  # a handle taken before the loss
    assert nvml.nvmlDeviceGetCount() == 4
    nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(0))
    simstate.restore_gpu(sim_settings, 1)
    nvml.nvmlDeviceGetMemoryInfo(h)


def test_xid_events(nvml, sim_settings):
    simstate.inject_xid(sim_settings, 0, 31)  # before the set exists: not delivered
    es = nvml.nvmlEventSetCreate()
    for i in (0, 2):
        nvml.nvmlDeviceRegisterEvents(nvml.nvmlDeviceGetHandleByIndex(i), pynvml.nvmlEventTypeXidCriticalError, es)
    simstate.inject_xid(sim_settings, 1, 13)  # GPU 1 is not registered
    simstate.inject_xid(sim_settings, 2, 79)
    ev = nvml.nvmlEventSetWait_v2(es, 1000)
    assert (ev.eventType, ev.eventData, nvml.nvmlDeviceGetIndex(ev.device)) == (
        pynvml.nvmlEventTypeXidCriticalError, 79, 2)
    start = time.monotonic()
    with pytest.raises(pynvml.NVMLError_Timeout):
        nvml.nvmlEventSetWait_v2(es, 100)
    assert 0.09 <= time.monotonic() - start < 1.0
    nvml.nvmlEventSetFree(es)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nvml.nvmlEventSetWait_v2(es, 10)


def _inject_later(state_dir: str) -> None:
    time.sleep(0.2)
    simstate.inject_xid(state_dir, 0, 48)


def test_event_wait_sees_an_xid_from_another_process(nvml, sim_settings):
    es = nvml.nvmlEventSetCreate()
    nvml.nvmlDeviceRegisterEvents(nvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlEventTypeXidCriticalError, es)
    p = mp.get_context("fork").Process(target=_inject_later, args=(str(sim_settings.sim_state_dir),))
    p.start()
    try:
        assert nvml.nvmlEventSetWait_v2(es, 10_000).eventData == 48
    finally:
        p.join()


def test_ecc_counts_and_models_without_ecc(make_sim):
    s = make_sim("1xH100-80GB+1xRTX4090-24GB")
    n = device_backend(s).nvml
    n.nvmlInit()
    try:
        h100, rtx = n.nvmlDeviceGetHandleByIndex(0), n.nvmlDeviceGetHandleByIndex(1)
        simstate.set_ecc_errors(s, 0, corrected=5, uncorrected=2)
        c, u, vol = (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                     pynvml.NVML_VOLATILE_ECC)
        assert (n.nvmlDeviceGetTotalEccErrors(h100, c, vol), n.nvmlDeviceGetTotalEccErrors(h100, u, vol)) == (5, 2)
        with pytest.raises(pynvml.NVMLError_NotSupported):
            n.nvmlDeviceGetTotalEccErrors(rtx, u, vol)  # GeForce boards have no ECC
    finally:
        n.nvmlShutdown()


def _add_many(state_dir: str, gpu: int, count: int) -> None:
    for _ in range(count):
        simstate.add_foreign_process(state_dir, gpu, 1024)


def test_concurrent_writers_lose_no_update(sim_settings):
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_add_many, args=(str(sim_settings.sim_state_dir), i, 15)) for i in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        assert p.exitcode == 0
    state = simstate.read_state(sim_settings)
    assert len(state.foreign) == 45
    assert len({p.pid for p in state.foreign}) == 45  # simulated pids never collide


def test_unreadable_state_reads_as_idle(sim_settings, caplog):
    path = simstate.state_path(sim_settings)
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert simstate.read_state(sim_settings).foreign == []
    assert "unreadable" in caplog.text


def test_process_memory_is_whole_bytes_and_never_negative(sim_settings):
    simstate.register_process(sim_settings, 0, os.getpid(), 1.5e9)
    assert [p.used_memory for p in simstate.live_processes(sim_settings, 0)] == [1_500_000_000]
    with pytest.raises(ValueError, match="used_memory"):
        simstate.add_foreign_process(sim_settings, 0, -1)
    with pytest.raises(ValueError, match="used_memory"):
        simstate.register_process(sim_settings, 0, os.getpid(), "8GB")


def test_nvlink_throughput_field_values_count_up_on_a_busy_gpu(tmp_path):
    from gpufleet.config import load_settings

    s = load_settings(data_dir=tmp_path / "d", simulate="2xH100-80GB+1xL4-24GB", simulate_topology="nvlink-all")
    n = device_backend(s).nvml
    n.nvmlInit()
    try:
        fields = [pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, 0)]
        h0 = n.nvmlDeviceGetHandleByIndex(0)
        # The state pynvml reports for each NVLink of an NV18 pair: enabled.
        assert all(n.nvmlDeviceGetNvLinkState(h0, link) == pynvml.NVML_FEATURE_ENABLED for link in range(18))
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            simstate.register_process(s, 0, proc.pid, 10 * GIB)
            first = n.nvmlDeviceGetFieldValues(h0, fields)
            assert [v.nvmlReturn for v in first] == [pynvml.NVML_SUCCESS] * 2
            assert isinstance(first[0], pynvml.c_nvmlFieldValue_t)
            assert first[0].valueType == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
            deadline = time.monotonic() + 30
            while True:
                later = n.nvmlDeviceGetFieldValues(h0, fields)
                if later[0].value.ullVal > first[0].value.ullVal and later[1].value.ullVal > first[1].value.ullVal:
                    break
                assert time.monotonic() < deadline, "the NVLink counters never moved"
                time.sleep(0.05)
        finally:
            proc.kill()
            proc.wait()
        # A GPU without NVLink answers, per field, NOT_SUPPORTED; an unmodelled field too.
        l4 = n.nvmlDeviceGetFieldValues(n.nvmlDeviceGetHandleByIndex(2), fields)
        assert [v.nvmlReturn for v in l4] == [pynvml.NVML_ERROR_NOT_SUPPORTED] * 2
        other = n.nvmlDeviceGetFieldValues(h0, [pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX])
        assert other[0].nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED
    finally:
        n.nvmlShutdown()
