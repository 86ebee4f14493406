"""Device groups and --gpu-ids: NVLink only where the links say so, clear errors otherwise."""

from __future__ import annotations

import pytest
import torch

from gpufleet.devices import (
    DeviceGroup,
    GPUDevice,
    DeviceId,
    create_device_group,
    detect_gpus,
    detect_topology,
    device_group_from_settings,
    parse_device_ids,
    resolve_device_ids,
    simstate,
)
from gpufleet.config import load_settings


def _machine(make_sim, spec, layout="nvlink-all"):
    s = make_sim(spec, layout)
    gpus = detect_gpus(s)
    return s, gpus, detect_topology(s, gpus)


def test_auto_on_an_nvlink_box_is_nvlink(make_sim):
    _, gpus, topo = _machine(make_sim, "4xH100-80GB")
    g = create_device_group("auto", None, True, gpus, topo)
    assert g.mode == "nvlink" and g.ids == [0, 1, 2, 3] and g.peer_access
    assert g.primary() == torch.device("cuda", 0)
    assert g.all() == [torch.device("cuda", i) for i in range(4)]
    assert (g.count(), g.is_multi_gpu()) == (4, True)


def test_auto_without_nvlink_is_pcie_not_nvlink(make_sim):
    _, gpus, topo = _machine(make_sim, "4xRTX4090-24GB", "pcie")
    g = create_device_group("auto", None, True, gpus, topo)
    assert g.mode == "pcie" and g.is_multi_gpu()
    assert not g.peer_access  # 0-2 share no switch


def test_auto_uses_nvlink_only_when_every_pair_has_it(make_sim):
    _, gpus, topo = _machine(make_sim, "4xA100-80GB", "nvlink-pairs")
    assert create_device_group("auto", [0, 1], True, gpus, topo).mode == "nvlink"
    assert create_device_group("auto", [2, 3], True, gpus, topo).mode == "nvlink"
    assert create_device_group("auto", [0, 1, 2], True, gpus, topo).mode == "pcie"
    assert create_device_group("auto", None, True, gpus, topo).mode == "pcie"
    # Without a topology NVLink cannot be confirmed, so it is not assumed.
    assert create_device_group("auto", [0, 1], True, gpus, None).mode == "pcie"


def test_asking_nvlink_where_links_say_otherwise_is_refused(make_sim):
    _, gpus, topo = _machine(make_sim, "4xA100-80GB", "nvlink-pairs")
    with pytest.raises(ValueError, match=r"no NVLink: 0-2 \(NODE\), 1-2 \(NODE\)"):
        create_device_group("nvlink", [0, 1, 2], True, gpus, topo)
    with pytest.raises(ValueError, match="needs the GPU topology"):
        create_device_group("nvlink", [0, 1], True, gpus, None)
    with pytest.raises(ValueError, match="at least two GPUs"):
        create_device_group("nvlink", [0], True, gpus, topo)
    assert create_device_group("nvlink", [3, 2], True, gpus, topo).ids == [3, 2]


def test_single_and_cpu(make_sim, settings):
    _, gpus, topo = _machine(make_sim, "2xH100-80GB")
    one = create_device_group("single", None, True, gpus, topo)
    assert (one.mode, one.ids, one.primary()) == ("single", [0], torch.device("cuda", 0))
    assert not one.is_multi_gpu() and not one.peer_access
    assert create_device_group("auto", [1], True, gpus, topo).mode == "single"
    with pytest.raises(ValueError, match="takes one GPU"):
        create_device_group("single", [0, 1], True, gpus, topo)
    cpu = create_device_group("cpu", None, True, gpus, topo)
    assert (cpu.mode, cpu.ids, cpu.all(), cpu.count()) == ("cpu", [], [torch.device("cpu")], 1)
    # No GPU at all: auto falls back to the CPU, an explicit GPU mode is refused.
    assert create_device_group("auto", None, True, [], None).mode == "cpu"
    with pytest.raises(ValueError, match="none are usable"):
        create_device_group("single", None, True, [], None)
    # The seed's mode names still work.
    assert create_device_group("single_gpu", None, True, gpus, topo).mode == "single"


def test_bad_requests(make_sim):
    s, gpus, topo = _machine(make_sim, "2xH100-80GB+1xA770-16GB")
    with pytest.raises(ValueError, match="unknown gpu mode 'fast'"):
        create_device_group("fast", None, True, gpus, topo)
    with pytest.raises(ValueError,
                       match=r"GPU 7 does not exist; this machine has 0 \(cuda:0\), 1 \(cuda:1\), 2 \(xpu:0\)"):
        create_device_group("auto", [0, 7], True, gpus, topo)
    with pytest.raises(ValueError, match="different backends"):
        create_device_group("auto", [0, 2], True, gpus, topo)
    with pytest.raises(ValueError, match="cannot mix backends"):
        DeviceGroup("pcie", (gpus[0], gpus[2]))
    # Auto with no devices stays on one backend (the first one detected).
    assert create_device_group("auto", None, True, gpus, topo).device_strings() == ["cuda:0", "cuda:1"]
    assert create_device_group("auto", "xpu:0", True, gpus, topo).primary() == torch.device("xpu", 0)
    simstate.lose_gpu(s, 1)
    gpus = detect_gpus(s)
    with pytest.raises(ValueError, match=r"GPU 1 \(cuda:1\) is unhealthy: .*GPU is lost"):
        create_device_group("auto", [0, 1], True, gpus, topo)
    assert create_device_group("auto", None, True, gpus, topo).ids == [0]  # the healthy ones


def test_from_settings_reads_the_gpu_block(tmp_path):
    s = load_settings(
        data_dir=tmp_path, simulate="4xA100-80GB", simulate_topology="nvlink-pairs",
        gpu={"mode": "nvlink", "devices": [2, 3]},
    )
    g = device_group_from_settings(s)
    assert (g.mode, g.device_strings()) == ("nvlink", ["cuda:2", "cuda:3"])
    with pytest.raises(ValueError, match="no NVLink"):
        device_group_from_settings(s, devices=[1, 2])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0,1", [DeviceId(None, 0), DeviceId(None, 1)]),
        (" 3 ", [DeviceId(None, 3)]),
        ("cuda:0,cuda:1", [DeviceId("cuda", 0), DeviceId("cuda", 1)]),
        ("cuda:0, xpu:0", [DeviceId("cuda", 0), DeviceId("xpu", 0)]),
        ("hip:0", [DeviceId("hip", 0)]),
        ("CPU", [DeviceId("cpu", None)]),
    ],
)
def test_parse_device_ids(text, expected):
    assert parse_device_ids(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no devices given"),
        ("cuda:x", "must be an integer"),
        ("tpu:0", "unknown backend 'tpu'"),
        ("0,0", "listed twice"),
        ("0,,1", "empty item"),
        ("-1", "not a GPU number"),
        ("gpu", "not a GPU number"),
        ("cpu,0", "cannot be combined"),
    ],
)
def test_parse_device_ids_errors(text, message):
    with pytest.raises(ValueError, match=message):
        parse_device_ids(text)


def test_resolve_device_ids(make_sim):
    _, gpus, _ = _machine(make_sim, "2xH100-80GB+1xMI300X+1xA770-16GB")
    assert [g.index for g in resolve_device_ids("cuda:1,0", gpus)] == [1, 0]
    assert [g.index for g in resolve_device_ids("hip:0,xpu:0", gpus)] == [2, 3]
    assert resolve_device_ids("cpu", gpus) == []
    with pytest.raises(ValueError, match="already listed"):
        resolve_device_ids("0,cuda:0", gpus)
    with pytest.raises(ValueError, match="GPU xpu:1 does not exist"):
        resolve_device_ids("xpu:1", gpus)
    # On a ROCm host torch calls AMD GPUs cuda:N.
    _, amd, _ = _machine(make_sim, "2xMI300X")
    assert [g.label for g in resolve_device_ids("cuda:1", amd)] == ["hip:1"]


def test_gpu_device_names_the_torch_device(make_sim):
    _, gpus, _ = _machine(make_sim, "1xH100-80GB+1xMI300X+1xA770-16GB")
    devs = [GPUDevice(g) for g in gpus]
    assert [d.device for d in devs] == [torch.device("cuda", 0), torch.device("cuda", 0), torch.device("xpu", 0)]
    assert [(d.backend, d.vendor) for d in devs] == [("cuda", "nvidia"), ("hip", "amd"), ("xpu", "intel")]
