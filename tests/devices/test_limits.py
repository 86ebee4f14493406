"""Which limit holds a share: the driver's per-cgroup limit only where the driver has the function,
PyTorch's allocator cap on CUDA and ROCm, the watchdog where NVML reports per-process memory."""

from __future__ import annotations

import pynvml
import pytest

from gpufleet.devices import limits, simlimits

GIB = 1024**3
CGROUP = "/sys/fs/cgroup/gpufleet/t-1"


def test_an_older_driver_has_no_memory_limit_function_and_the_choice_says_so(nvml, sim_settings):
    simlimits.set_driver_version(sim_settings, "560.35.03")
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):  # what the real binding raises on such a driver
        nvml.nvmlDeviceSetMemoryLimits_v1(handle, pynvml.c_nvmlSetMemoryLimits_v1_t())
    plan = limits.choose("cuda", nvml, handle, cgroup=CGROUP)
    assert plan.methods == (limits.ALLOCATOR, limits.WATCHDOG)
    assert plan.why_not[limits.DRIVER] == "driver 560.35.03 has no nvmlDeviceSetMemoryLimits_v1"
    assert "not by the driver's per-cgroup memory limit (driver 560.35.03" in plan.say(10240)


def test_a_newer_driver_holds_the_share_itself_and_the_limit_reads_back(nvml, sim_settings):
    simlimits.set_driver_version(sim_settings, "580.65.06")
    handle = nvml.nvmlDeviceGetHandleByIndex(1)
    plan = limits.choose("cuda", nvml, handle, cgroup=CGROUP)
    assert plan.methods == (limits.DRIVER, limits.ALLOCATOR, limits.WATCHDOG) and plan.strongest == "driver"
    limits.set_driver_limit(nvml, handle, CGROUP, 10 * GIB)
    got = pynvml.c_nvmlGetMemoryLimits_v1_t()
    got.nameSpace = CGROUP.encode()
    nvml.nvmlDeviceGetMemoryLimits_v1(handle, got)
    assert (got.softLimit, got.hardLimit) == (10 * GIB, 10 * GIB)
    limits.clear_driver_limit(nvml, handle, CGROUP)
    nvml.nvmlDeviceGetMemoryLimits_v1(handle, got)
    assert (got.softLimit, got.hardLimit) == (0, pynvml.NVML_DEVICE_MEMORY_LIMIT_MAX)


def test_the_driver_limit_needs_a_cgroup_of_the_works_own(nvml, sim_settings):
    simlimits.set_driver_version(sim_settings, "580.65.06")
    plan = limits.choose("cuda", nvml, nvml.nvmlDeviceGetHandleByIndex(0), cgroup=None)
    assert plan.strongest == limits.ALLOCATOR
    assert "no cgroup of its own" in plan.why_not[limits.DRIVER]


def test_a_binding_without_the_function_is_found_out_by_looking_not_by_version():
    class OldBinding:  # an nvidia-ml-py from before the function: the attribute is simply absent
        NVMLError = pynvml.NVMLError

    assert limits.driver_limit_offered(OldBinding(), None) == "this nvidia-ml-py has no nvmlDeviceSetMemoryLimits_v1"


def test_vendors_without_an_in_process_limit_are_refused_with_a_whole_gpu_offered():
    assert limits.refusal("cuda") is None and limits.refusal("hip") is None
    assert limits.choose("hip").methods == (limits.ALLOCATOR,)
    text = limits.refusal("xpu")
    assert text is not None and "whole GPU" in text and "memory_mb" in text
    assert limits.choose("xpu").methods == ()
