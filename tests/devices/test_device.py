"""The device value: a GPU by index or UUID, a MIG instance, a share of a GPU, and the set a process sees."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpufleet.devices.device import (
    DEVICE_ENV,
    Device,
    DeviceSet,
    index_list,
    visible_value,
)

MIG = "MIG-c7384736-a75d-5afc-978f-d2f1294409fd"
OLD_MIG = "MIG-GPU-5fd4f3d4-34b4-a8b7-4d5e-1b3fcd3b4b79/1/0"


def test_each_backend_sets_its_own_variable_and_cuda_numbers_as_nvml_does() -> None:
    assert DeviceSet.of("cuda", [3, 5]).env() == {"CUDA_VISIBLE_DEVICES": "3,5", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert DeviceSet.of("hip", [1]).env() == {"HIP_VISIBLE_DEVICES": "1"}
    assert DeviceSet.of("xpu", [0, 2]).env() == {"ZE_AFFINITY_MASK": "0,2"}


def test_an_empty_set_hides_every_gpu_rather_than_showing_all() -> None:
    # An unset variable would let the process see the whole machine; an empty one shows it none.
    assert DeviceSet("cuda").env() == {"CUDA_VISIBLE_DEVICES": "", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert DeviceSet.parse("").devices == () and DeviceSet.parse(" , ").devices == ()


def test_a_mig_instance_goes_end_to_end_by_its_uuid() -> None:
    one = Device("cuda", uuid=MIG)
    assert one.is_mig and one.index is None and one.visible_id == MIG and one.label == f"cuda:{MIG}"
    two = DeviceSet("cuda", (one, Device("cuda", uuid=OLD_MIG)))
    env = two.env()
    assert env["CUDA_VISIBLE_DEVICES"] == f"{MIG},{OLD_MIG}"
    # What a process (or Slurm) was given reads back as the same devices, from the variable or the labels.
    assert DeviceSet.from_env(env) == two == DeviceSet.from_labels(two.labels)
    assert Device.parse(f"cuda:{MIG}") == one == Device.parse(MIG)


def test_the_string_forms_read_back() -> None:
    s = DeviceSet.parse("0, 2")
    assert s.indexes == [0, 2] and s.value == "0,2" and s.display(", ") == "0, 2" and s.labels == ["cuda:0", "cuda:2"]
    assert DeviceSet.from_labels(["hip:1", "hip:0"]) == DeviceSet.of("hip", [1, 0])
    assert DeviceSet.from_env({"HIP_VISIBLE_DEVICES": "1"}, "hip") == DeviceSet.of("hip", [1])
    assert DeviceSet.from_env({}, "cuda") is None  # unset: the process is not narrowed at all
    assert Device.parse("hip:3") == Device("hip", index=3) and Device.parse("3", "xpu") == Device("xpu", index=3)
    assert [d.index for d in DeviceSet.of("cuda", [1, 0])] == [1, 0] and len(DeviceSet.of("cuda", [4])) == 1


def test_a_share_is_the_same_device_with_a_memory_budget() -> None:
    whole = Device("cuda", index=0)
    half = whole.share(40_000)
    assert whole.whole and not half.whole and half.share_mb == 40_000
    # A share is seen through the same variable as its GPU.
    assert half.visible_id == "0" and DeviceSet("cuda", (half,)).value == "0"


def test_a_device_set_names_no_gpu_twice_and_mixes_no_backends() -> None:
    with pytest.raises(ValueError, match="device 1 is listed twice"):
        DeviceSet.of("cuda", [1, 1])
    with pytest.raises(ValueError, match="cannot hold hip ones"):
        DeviceSet.from_labels(["cuda:0", "hip:0"])
    with pytest.raises(ValueError, match="no device given"):
        DeviceSet.from_labels([])


@pytest.mark.parametrize(("make", "says"), [
    (lambda: Device("rocm", index=0), "unknown backend 'rocm'"),
    (lambda: Device("cuda"), "by its index or its UUID"),
    (lambda: Device("cuda", index=-1), "whole number from 0"),
    (lambda: Device("cuda", index=True), "whole number from 0"),
    (lambda: Device("cuda", uuid="MIG-a,MIG-b"), "is not a GPU's UUID"),
    (lambda: Device("cuda", uuid="GPU-1 2"), "is not a GPU's UUID"),
    (lambda: Device("hip", uuid=MIG), "MIG instances are NVIDIA's"),
    (lambda: Device("cuda", index=0, uuid=MIG), "a MIG instance has no index"),
    (lambda: Device("xpu", uuid="GPU-abc"), "made visible by its index"),
    (lambda: Device("cuda", index=0, share_mb=0), "MB above 0"),
    (lambda: Device("cuda", index=0).share(-5), "MB above 0"),
    (lambda: Device.parse("gpu:0"), "unknown backend 'gpu'"),
    (lambda: DeviceSet.parse("0,x"), "is not a GPU's UUID"),
    (lambda: DeviceSet.of("cuda", [MIG]).indexes, "has no index"),
])
def test_a_device_that_cannot_be_says_what_to_fix(make, says) -> None:
    with pytest.raises(ValueError, match=says):
        make()


def test_a_value_that_names_gpus_cannot_smuggle_a_second_one_in() -> None:
    # The variable separates devices with commas: a UUID with a comma would make one device two.
    with pytest.raises(ValueError):
        DeviceSet("cuda", (Device("cuda", uuid="GPU-a,0"),))


def test_the_names_and_the_display_forms() -> None:
    assert {"CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "ZE_AFFINITY_MASK",
            "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"} == DEVICE_ENV
    assert index_list([0, 1]) == "0,1" and index_list((i for i in (2, 3)), ", ") == "2, 3" and index_list([]) == ""
    # The first variable set to something: the order variable, which names no GPU, is skipped.
    assert visible_value({"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "HIP_VISIBLE_DEVICES": "1"}) == "1"
    assert visible_value({"CUDA_VISIBLE_DEVICES": "", "ZE_AFFINITY_MASK": "0"}) == "0" and visible_value({}) == ""


def test_the_value_loads_nothing_of_the_server() -> None:
    # The client and the CLI read it (a shell's allowed variables, GPUs shown in a table).
    code = ("import sys, gpufleet.devices.device, gpufleet.devices; "
            "print(sorted(m for m in ('gpufleet.config', 'pydantic', 'sqlalchemy', 'torch', 'gpufleet.devices.backend')"
            " if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr
