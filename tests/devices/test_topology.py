"""Topology read from (simulated) NVML: the three layouts, peer access, and GPUs NVML cannot describe."""

from __future__ import annotations

import logging

from gpufleet.devices import detect_gpus, detect_topology, format_matrix, log_gpu_topology, simstate
from gpufleet.devices.topology import peer_pairs


def _topo(make_sim, spec, layout):
    s = make_sim(spec, layout)
    return detect_topology(s, detect_gpus(s))


def _rows(topology):
    return [line.split() for line in format_matrix(topology).splitlines()]


def test_nvlink_all_through_nvswitch(make_sim):
    t = _topo(make_sim, "8xH100-80GB", "nvlink-all")
    rows = _rows(t)
    assert rows[0] == [f"GPU{i}" for i in range(8)]
    for i, row in enumerate(rows[1:]):
        assert row == [f"GPU{i}"] + ["X" if j == i else "NV18" for j in range(8)]
    assert len(peer_pairs(t)) == 28
    assert t.nvlink_connected(list(range(8)))


def test_nvlink_all_two_gpus_bridged_directly(make_sim):
    t = _topo(make_sim, "2xRTX3090-24GB", "nvlink-all")
    assert t.link(0, 1).nvlink_count == 4 and t.link(1, 0).label == "NV4"
    assert t.link(0, 1).peer_access


def test_nvlink_pairs(make_sim):
    t = _topo(make_sim, "8xA100-80GB", "nvlink-pairs")
    assert format_matrix(t).splitlines()[1:] == [
        "GPU0  X     NV12  NODE  NODE  SYS   SYS   SYS   SYS",
        "GPU1  NV12  X     NODE  NODE  SYS   SYS   SYS   SYS",
        "GPU2  NODE  NODE  X     NV12  SYS   SYS   SYS   SYS",
        "GPU3  NODE  NODE  NV12  X     SYS   SYS   SYS   SYS",
        "GPU4  SYS   SYS   SYS   SYS   X     NV12  NODE  NODE",
        "GPU5  SYS   SYS   SYS   SYS   NV12  X     NODE  NODE",
        "GPU6  SYS   SYS   SYS   SYS   NODE  NODE  X     NV12",
        "GPU7  SYS   SYS   SYS   SYS   NODE  NODE  NV12  X",
    ]
    assert peer_pairs(t) == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert t.link(0, 2).pcie_level == "NODE" and t.link(0, 2).nvlink_count == 0
    assert t.nvlink_missing([0, 1, 2]) == [(0, 2), (1, 2)]


def test_pcie_two_gpus_per_switch_two_switches_per_node(make_sim):
    t = _topo(make_sim, "8xH100-80GB", "pcie")
    assert format_matrix(t).splitlines()[1:] == [
        "GPU0  X     PIX   NODE  NODE  SYS   SYS   SYS   SYS",
        "GPU1  PIX   X     NODE  NODE  SYS   SYS   SYS   SYS",
        "GPU2  NODE  NODE  X     PIX   SYS   SYS   SYS   SYS",
        "GPU3  NODE  NODE  PIX   X     SYS   SYS   SYS   SYS",
        "GPU4  SYS   SYS   SYS   SYS   X     PIX   NODE  NODE",
        "GPU5  SYS   SYS   SYS   SYS   PIX   X     NODE  NODE",
        "GPU6  SYS   SYS   SYS   SYS   NODE  NODE  X     PIX",
        "GPU7  SYS   SYS   SYS   SYS   NODE  NODE  PIX   X",
    ]
    assert peer_pairs(t) == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert not any(link.nvlink_count for link in t.links.values())


def test_models_without_nvlink_stay_on_pcie_in_nvlink_layouts(make_sim):
    t = _topo(make_sim, "4xRTX4090-24GB", "nvlink-all")
    assert {link.label for link in t.links.values()} == {"NODE"}
    assert peer_pairs(t) == []


def test_mixed_vendors_have_no_nvlink_or_peer_access_across(make_sim):
    t = _topo(make_sim, "2xH100-80GB+1xMI300X+1xA770-16GB", "nvlink-all")
    assert t.link(0, 1).label == "NV18"
    assert t.link(0, 2) == t.link(2, 0)
    assert t.link(0, 2).nvlink_count == 0 and not t.link(0, 2).peer_access
    assert t.link(2, 3).pcie_level == "NODE"  # the simulated layout, not NVML
    assert peer_pairs(t) == [(0, 1)]


def test_lost_gpu_links_are_unknown(make_sim):
    s = make_sim("4xH100-80GB", "nvlink-all")
    simstate.lose_gpu(s, 1)
    t = detect_topology(s, detect_gpus(s))
    assert t.link(0, 1).label == "?" and not t.link(0, 1).peer_access
    assert t.link(0, 2).label == "NV18"


def test_refused_nvlink_and_p2p_fields(make_sim):
    s = make_sim("4xH100-80GB", "nvlink-all")
    simstate.refuse_field(s, 0, "nvlink", "not_supported")
    simstate.refuse_field(s, 3, "p2p", "no_permission")
    t = detect_topology(s, detect_gpus(s))
    assert t.link(0, 1).nvlink_count == 0 and t.link(0, 1).pcie_level == "NODE"
    assert t.link(1, 2).label == "NV18"
    assert not t.link(2, 3).peer_access and t.link(1, 2).peer_access


def test_to_dict_and_no_gpus(make_sim, settings):
    t = _topo(make_sim, "2xH100-80GB", "pcie")
    d = t.to_dict()
    assert d["matrix"] == [["X", "PIX"], ["PIX", "X"]]
    assert d["links"] == [{"gpu_a": 0, "gpu_b": 1, "nvlink_count": 0, "pcie_level": "PIX", "peer_access": True}]
    assert len(d["gpus"]) == 2
    empty = detect_topology(settings, detect_gpus(settings))
    assert empty.links == {} and format_matrix(empty) == "no GPUs"


def test_log_gpu_topology(make_sim, caplog):
    t = _topo(make_sim, "4xH100-80GB", "nvlink-pairs")
    with caplog.at_level(logging.INFO, logger="gpufleet.devices.groups"):
        info = log_gpu_topology(t)
    assert "GPU 0 (cuda:0): NVIDIA H100 80GB HBM3, 80.0 GiB, compute 9.0 (simulated)" in caplog.text
    assert "GPU0  X     NV18  NODE  NODE" in caplog.text
    assert "Peer access: 0-1, 2-3" in caplog.text
    assert info["peer_pairs"] == [(0, 1), (2, 3)] and info["matrix"][0] == ["X", "NV18", "NODE", "NODE"]
