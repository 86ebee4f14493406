"""Detection: simulated fleets of several shapes, refused fields, lost GPUs, and this real machine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.devices import detect_gpus, simstate
from gpufleet.devices.detect import detect_nvidia, pci_vendor_present, probe_torch_gpus

GIB = 1024**3


def test_four_h100(sim_settings):
    gpus = detect_gpus(sim_settings)
    assert [g.index for g in gpus] == [0, 1, 2, 3]
    assert {(g.backend, g.vendor, g.name, g.memory_total, g.compute_capability) for g in gpus} == {
        ("cuda", "nvidia", "NVIDIA H100 80GB HBM3", 80 * GIB, "9.0")
    }
    assert [g.device_id for g in gpus] == [0, 1, 2, 3]
    assert all(g.simulated and g.healthy and g.error is None for g in gpus)
    assert len({g.uuid for g in gpus}) == 4 and len({g.pci_bus_id for g in gpus}) == 4
    assert all(g.memory_free is not None and 0 < g.memory_free <= g.memory_total for g in gpus)


def test_mixed_vendors_are_numbered_nvidia_amd_intel(make_sim):
    s = make_sim("1xA770-16GB+2xRTX3090-24GB+1xMI300X")
    gpus = detect_gpus(s)
    summary = [(g.index, g.label, g.vendor, g.name, g.memory_total // GIB) for g in gpus]
    assert summary == [
        (0, "cuda:0", "nvidia", "NVIDIA GeForce RTX 3090", 24),
        (1, "cuda:1", "nvidia", "NVIDIA GeForce RTX 3090", 24),
        (2, "hip:0", "amd", "AMD Instinct MI300X", 192),
        (3, "xpu:0", "intel", "Intel(R) Arc(TM) A770 Graphics", 16),
    ]
    assert [g.compute_capability for g in gpus] == ["8.6", "8.6", None, None]
    assert [g.torch_device for g in gpus] == ["cuda:0", "cuda:1", "cuda:0", "xpu:0"]  # ROCm torch says cuda
    assert all(g.simulated and g.healthy for g in gpus)


def test_unknown_model_gets_defaults_and_the_spec_memory(make_sim):
    gpus = detect_gpus(make_sim("2xB300-288GB+1xFOO"))
    assert [(g.name, g.memory_total // GIB, g.vendor) for g in gpus] == [
        ("NVIDIA B300", 288, "nvidia"), ("NVIDIA B300", 288, "nvidia"), ("NVIDIA FOO", 16, "nvidia")
    ]
    assert gpus[0].compute_capability is not None


def test_same_fleet_same_identity_other_host_other_identity(make_sim):
    a = detect_gpus(make_sim("2xA100-40GB", host_name="a100-01"))
    again = detect_gpus(make_sim("2xA100-40GB", host_name="a100-01"))
    other = detect_gpus(make_sim("2xA100-40GB", host_name="a100-02"))
    assert [g.uuid for g in a] == [g.uuid for g in again]
    assert not {g.uuid for g in a} & {g.uuid for g in other}
    assert a[0].name == "NVIDIA A100-SXM4-40GB"


def test_memory_free_follows_processes_for_every_vendor(make_sim):
    s = make_sim("1xH100-80GB+1xMI300X")
    simstate.add_foreign_process(s, 0, 30 * GIB)
    simstate.add_foreign_process(s, 1, 100 * GIB)
    nv, amd = detect_gpus(s)
    assert 49 * GIB < nv.memory_free <= 50 * GIB
    assert 91 * GIB < amd.memory_free <= 92 * GIB


def test_refused_fields_are_none(make_sim):
    s = make_sim("2xH100-80GB+1xA770-16GB")
    simstate.refuse_field(s, 0, "memory", "not_supported")
    simstate.refuse_field(s, 0, "compute_capability", "no_permission")
    simstate.refuse_field(s, 1, "uuid", "unknown")
    simstate.refuse_field(s, 1, "pci", "not_supported")
    simstate.refuse_field(s, 2, "memory", "not_supported")
    g0, g1, g2 = detect_gpus(s)
    assert (g0.memory_total, g0.memory_free, g0.compute_capability) == (None, None, None)
    assert g0.name == "NVIDIA H100 80GB HBM3" and g0.uuid is not None
    assert (g1.uuid, g1.pci_bus_id) == (None, None) and g1.memory_total == 80 * GIB
    assert (g2.memory_total, g2.memory_free) == (None, None) and g2.name is not None
    # A refused field is not a broken GPU.
    assert all(g.healthy for g in (g0, g1, g2))


def test_lost_gpu_is_reported_and_does_not_hide_others(make_sim):
    s = make_sim("4xH100-80GB+1xMI300X")
    simstate.lose_gpu(s, 2)
    simstate.lose_gpu(s, 4)
    gpus = detect_gpus(s)
    assert [g.index for g in gpus] == [0, 1, 2, 3, 4]
    assert [g.healthy for g in gpus] == [True, True, False, True, False]
    assert "GPU is lost" in gpus[2].error and gpus[2].label == "cuda:2"
    assert gpus[4].error and gpus[4].vendor == "amd"
    assert gpus[3].name == "NVIDIA H100 80GB HBM3" and gpus[3].memory_total == 80 * GIB


class _LostMidway:
    """An NVML whose GPU 1 hands out a handle and then fails every query as lost."""

    def __init__(self, nvml):
        self._n = nvml

    def __getattr__(self, name):
        attr = getattr(self._n, name)
        if name.startswith("nvmlDeviceGet") and name not in ("nvmlDeviceGetHandleByIndex", "nvmlDeviceGetCount"):
            def call(handle, *args):
                if handle.index == 1:
                    raise self._n.NVMLError(self._n.NVML_ERROR_GPU_IS_LOST)
                return attr(handle, *args)

            return call
        return attr


def test_gpu_lost_while_reading_fields(sim_settings):
    from gpufleet.devices.backend import device_backend

    gpus = detect_nvidia(_LostMidway(device_backend(sim_settings).nvml), simulated=True)
    assert [g.healthy for g in gpus] == [True, False, True, True]
    assert gpus[1].error == "GPU is lost" and gpus[1].name is None and gpus[1].memory_total is None


def test_this_machine_without_a_driver_has_no_nvidia_gpus(settings):
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has an NVIDIA driver")
    assert detect_nvidia(pynvml) == []
    assert [g for g in detect_gpus(settings) if g.vendor == "nvidia"] == []


def test_torch_probe_on_a_cpu_build_finds_nothing():
    import torch

    if getattr(torch.version, "hip", None) or (hasattr(torch, "xpu") and torch.xpu.is_available()):
        pytest.skip("this torch has ROCm or XPU")
    assert probe_torch_gpus() == {"hip": [], "xpu": []}


def test_pci_vendor_scan(tmp_path: Path):
    def dev(name: str, vendor: str, cls: str) -> None:
        d = tmp_path / name
        d.mkdir()
        (d / "vendor").write_text(vendor + "\n")
        (d / "class").write_text(cls + "\n")

    dev("0000:00:02.0", "0x8086", "0x060000")  # an Intel host bridge is not a GPU
    dev("0000:03:00.0", "0x1002", "0x030000")
    assert pci_vendor_present("0x1002", tmp_path)
    assert not pci_vendor_present("0x8086", tmp_path)
    assert pci_vendor_present("0x1002", tmp_path / "absent")  # no sysfs: cannot rule it out


def test_detection_never_imports_torch(tmp_path):
    code = (
        "import sys, json\n"
        "from gpufleet.config import load_settings\n"
        "from gpufleet.devices import detect_gpus, detect_topology, create_device_group\n"
        f"s = load_settings(data_dir={str(tmp_path)!r}, simulate='2xH100-80GB+1xMI300X')\n"
        "g = detect_gpus(s); create_device_group('auto', None, True, g, detect_topology(s, g))\n"
        "print(json.dumps({'n': len(g), 'torch': 'torch' in sys.modules}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == {"n": 3, "torch": False}
