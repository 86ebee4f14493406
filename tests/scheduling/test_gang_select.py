"""GPU sets across hosts: recommend offers them when no single host fits (fewest hosts, then
intra-host links), and validate checks a selection of several hosts' GPUs."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from gpufleet.api.app import create_app
from gpufleet.scheduling.gang_select import recommend_across, validate_across
from gpufleet.scheduling.types import GiB, SelectionRequest

from .fleets import fleet, host, pcie_links


def test_fewest_hosts_first_then_nvlink_inside_each_host():
    f = fleet(host("a", 4), host("b", 4, links=pcie_links(4)), host("c", 2), host("d", 8))
    sets, why = recommend_across(SelectionRequest(memory_bytes=10 * GiB, count=10, max_candidates=5), f)
    assert why is None
    # Two hosts suffice (d: 8 + any other), so no three-host set is offered.
    assert {s.hosts for s in sets} == {2}
    first = sets[0]
    assert "d" in [p.host for p in first.parts]
    assert sum(len(p.gpu_indexes) for p in first.parts) == 10
    assert first.reasons[0] == "no host has 10 free GPUs" and "over the network" in first.reasons[1]
    # An NVLink pair on c ranks before a PCIe-only pair on b.
    hosts_in_order = [tuple(sorted(p.host for p in s.parts)) for s in sets]
    assert hosts_in_order.index(("c", "d")) < hosts_in_order.index(("b", "d"))


def test_even_split_and_the_reason_when_nothing_fits():
    f = fleet(host("a", 4), host("b", 4, g1={"memory_free": GiB}))
    sets, _ = recommend_across(SelectionRequest(memory_bytes=10 * GiB, count=6), f)
    assert [len(p.gpu_indexes) for p in sets[0].parts] == [3, 3]
    sets, why = recommend_across(SelectionRequest(memory_bytes=10 * GiB, count=8), f)
    assert sets == [] and why.endswith("the fleet has 7 (a: 4, b: 3)")


def test_validate_across_names_the_host_of_each_problem():
    f = fleet(host("a", 4), host("b", 2))
    ok, problems, warnings = validate_across(f, [("a", [0, 1]), ("b", [0, 1])], memory_bytes=GiB)
    assert ok and not problems and warnings[0][0] == "across_hosts"
    ok, problems, _ = validate_across(f, [("a", [0, 1]), ("b", [0, 5]), ("a", [2])], memory_bytes=GiB)
    assert not ok
    codes = [(c, m) for c, m, _ in problems]
    assert any(c == "duplicate_host" for c, _ in codes)
    assert any(m.startswith("host b: ") and "5" in m for _, m in codes), codes


@pytest.fixture
def two_hosts(sim_host):
    a = sim_host("nvlink-pairs", "4xH100-80GB")
    b = sim_host("nvlink-pairs", "4xH100-80GB")
    with TestClient(create_app(a)) as c:
        yield a, b, c


def test_the_api_offers_sets_across_hosts_only_when_asked(two_hosts) -> None:
    a, b, c = two_hosts
    url = "/api/v1/system/gpus/recommend"
    r = c.get(url, params={"memory_mb": 1000, "count": 8})
    assert r.status_code == 422 and "on one host" in r.text
    r = c.get(url, params={"memory_mb": 1000, "count": 8, "across_hosts": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["candidates"] == [] and body["across_hosts"]
    top = body["across_hosts"][0]
    assert top["hosts"] == 2 and sorted(p["host"] for p in top["parts"]) == sorted([a.host_name, b.host_name])
    assert top["reasons"][0] == "no host has 8 free GPUs"
    r = c.get(url, params={"memory_mb": 1000, "count": 9, "across_hosts": True})
    assert r.status_code == 422 and "the fleet has 8" in r.text
    r = c.get(url, params={"memory_mb": 1000, "count": 2, "across_hosts": True})
    assert r.json()["candidates"] and r.json()["across_hosts"] == []  # one host fits: nothing across


def test_the_api_validates_a_selection_across_hosts(two_hosts) -> None:
    a, b, c = two_hosts
    url = "/api/v1/system/gpus/validate"
    r = c.post(url, json={"memory_mb": 1000, "parts": [{"host": a.host_name, "gpu_ids": [0, 1]},
                                                      {"host": b.host_name, "gpu_ids": [2, 3]}]})
    assert r.status_code == 200, r.text
    assert r.json()["ok"] is True and r.json()["gpu_ids"] == [0, 1, 2, 3]
    r = c.post(url, json={"memory_mb": 1000, "parts": [{"host": a.host_name, "gpu_ids": [0, 9]},
                                                      {"host": b.host_name, "gpu_ids": [0]}]})
    assert r.status_code == 200 and r.json()["ok"] is False
    assert any(p["message"].startswith(f"host {a.host_name}: ") for p in r.json()["problems"])
    r = c.post(url, json={"memory_mb": 1000, "parts": [{"host": "nowhere", "gpu_ids": [0]}]})
    assert r.status_code == 404
    r = c.post(url, json={"memory_mb": 1000, "gpu_ids": [0], "parts": [{"host": a.host_name, "gpu_ids": [0]}]})
    assert r.status_code == 422 and "not both" in r.text
