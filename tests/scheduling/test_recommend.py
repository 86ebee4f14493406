"""recommend(): NVLink first, then one switch, then one NUMA node; best fit; refusals."""

from __future__ import annotations

import pytest

from gpufleet.scheduling.recommend import recommend
from gpufleet.scheduling.types import GiB, LinkInfo, ProcessInfo, Reservation, SelectionRequest

from scheduling.fleets import fleet, host, nvlink_pairs_links, pcie_links


def test_two_gpus_get_an_nvlink_pair_when_one_gpu_of_each_pair_is_taken_elsewhere() -> None:
    # GPU 0 busy: the free GPUs are 1, 2, 3; only (2, 3) is NVLink-connected.
    f = fleet(host("a", 4, g0={"reservations": (Reservation("t1"),)}))
    rec = recommend(SelectionRequest(10 * GiB, 2), f)
    assert rec.top is not None
    assert rec.top.gpu_indexes == (2, 3)
    assert rec.top.connection == "nvlink"
    assert any("NVLink" in r for r in rec.top.reasons)
    # The rest rank below: (1, 2) and (1, 3) cross sockets or the host bridge.
    assert all(c.connection != "nvlink" for c in rec.candidates[1:])


def test_pcie_fleet_prefers_a_same_switch_pair_then_same_numa_node() -> None:
    f = fleet(host("p", 8, links=pcie_links(8), g0={"reservations": (Reservation("t1"),)}))
    rec = recommend(SelectionRequest(10 * GiB, 2, max_candidates=50), f)
    top = rec.top
    assert top is not None and top.connection == "pcie-switch"
    assert top.gpu_indexes in {(2, 3), (4, 5), (6, 7)}
    conns = [c.connection for c in rec.candidates]
    # Ranked best connection first.
    order = {"pcie-switch": 0, "numa": 1, "system": 2}
    assert [order[c] for c in conns] == sorted(order[c] for c in conns)
    assert "numa" in conns and "system" in conns


def test_pack_keeps_nvlink_pairs_whole_and_spread_does_not_care() -> None:
    # GPU 0 is taken, so GPU 1's partner is gone: a one-GPU job should go there.
    f = fleet(host("a", 4, g0={"reservations": (Reservation("t1"),)}))
    packed = recommend(SelectionRequest(10 * GiB, 1), f)
    assert packed.top is not None and packed.top.gpu_indexes == (1,)


def test_pack_is_best_fit_across_gpu_sizes_and_spread_takes_the_roomiest() -> None:
    f = fleet(host("small", 2, memory_gb=24, gpu_name="RTX 4090"), host("big", 2, memory_gb=80))
    packed = recommend(SelectionRequest(20 * GiB, 1), f)
    assert packed.top is not None and packed.top.host == "small"
    spread = recommend(SelectionRequest(20 * GiB, 1, policy="spread"), f)
    assert spread.top is not None and spread.top.host == "big"


def test_the_fit_reason_says_how_much_memory_stays_free_beside_the_job() -> None:
    f = fleet(host("a", 2, memory_gb=80, g0={"memory_free": 80 * GiB}, g1={"memory_free": 80 * GiB}))
    # A small job once read "leaves 100% of each GPU's memory idle", as though it left the GPU idle.
    tiny = recommend(SelectionRequest(GiB // 4, 1), f).top
    assert tiny is not None and "best fit: it needs under 1% of the GPU's memory" in tiny.reasons
    half = recommend(SelectionRequest(40 * GiB, 2), f).top
    assert half is not None and "best fit: 50% of each GPU's memory stays free beside it on average" in half.reasons
    spread = recommend(SelectionRequest(60 * GiB, 1, policy="spread"), f).top
    assert spread is not None and "spread: 25% of the GPU's memory stays free beside it" in spread.reasons
    assert not any("idle" in r for c in (tiny, half, spread) for r in c.reasons)


def test_foreign_process_and_short_memory_exclude_gpus() -> None:
    f = fleet(
        host(
            "a",
            4,
            g2={"processes": (ProcessInfo(pid=42, used_memory=20 * GiB, user="bob"),)},
            g3={"memory_free": 5 * GiB},
        )
    )
    rec = recommend(SelectionRequest(10 * GiB, 2, max_candidates=10), f)
    assert rec.top is not None and rec.top.gpu_indexes == (0, 1)
    assert all(2 not in c.gpu_indexes and 3 not in c.gpu_indexes for c in rec.candidates)


@pytest.mark.parametrize(
    ("request_", "words"),
    [
        (SelectionRequest(10 * GiB, 9), "needs 9 GPUs on one host; the largest host has 8"),
        (SelectionRequest(100 * GiB, 1), "the largest GPU in the fleet has 80.0 GiB"),
        (SelectionRequest(30 * GiB, 3), "at most 2 GPUs of that size share a host"),
        (SelectionRequest(GiB, 1, host="nope"), "host 'nope' is not in the fleet; known hosts: a, b"),
        (SelectionRequest(GiB, 5, host="b"), "host b has 4"),
    ],
)
def test_never_fitting_requests_are_refused_with_the_reason(request_: SelectionRequest, words: str) -> None:
    f = fleet(
        host("a", 8, memory_gb=24, gpu_name="RTX 4090", g0={"memory_total": 80 * GiB}, g1={"memory_total": 80 * GiB}),
        host("b", 4, memory_gb=24, gpu_name="RTX 4090"),
    )
    rec = recommend(request_, f)
    assert rec.candidates == ()
    assert rec.refused is not None and words in rec.refused, rec.refused


def test_nothing_free_now_gives_a_wait_reason_naming_the_best_host() -> None:
    f = fleet(host("a100-01", 4, memory_gb=40, g0={"reservations": (Reservation("t1", training_name="big"),)},
                   g1={"drained": True}, g2={"memory_free": 2 * GiB}))
    rec = recommend(SelectionRequest(30 * GiB, 2), f)
    assert rec.refused is None and rec.candidates == ()
    assert rec.wait_reason is not None
    assert "needs 2 GPUs with 30.0 GiB free on one host; host a100-01 has one free" in rec.wait_reason
    assert "GPU 0 busy: reserved exclusively by training big" in rec.wait_reason


def test_shared_requests_may_join_a_shared_gpu_but_exclusive_ones_not() -> None:
    shared = {"reservations": (Reservation("t1", exclusive=False, reserved_memory=10 * GiB),)}
    f = fleet(host("a", 1, g0=shared))
    assert recommend(SelectionRequest(10 * GiB, 1), f).top is None
    top = recommend(SelectionRequest(10 * GiB, 1, exclusive=False), f).top
    assert top is not None and top.gpu_indexes == (0,)
    # 79.5 GiB device-free minus 10 GiB reserved but not yet taken.
    assert top.free_memory == (int(79.5 * GiB) - 10 * GiB,)


def test_mixed_models_in_a_set_carry_speed_weights() -> None:
    f = fleet(host("m", 2, links=nvlink_pairs_links(2), g1={"name": "NVIDIA A100-SXM4-80GB"}))
    top = recommend(SelectionRequest(GiB, 2), f).top
    assert top is not None and len(top.weights) == 2
    # An H100 is faster than an A100 (989 vs 312 dense TFLOPS).
    assert top.weights[0] > top.weights[1]
    assert sum(top.weights) == pytest.approx(1.0, abs=1e-3)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("count", [1, 2, 3, 4])
@pytest.mark.parametrize("policy", ["pack", "spread"])
def test_pruned_ranking_equals_scoring_every_set(seed: int, count: int, policy: str) -> None:
    # recommend() skips hosts whose bound cannot beat the k-th best set; the
    # answer must be the one an exhaustive ranking gives.
    import random
    from itertools import combinations

    from gpufleet.scheduling.recommend import fits, _HostView

    rng = random.Random(seed)
    hosts = []
    for h in range(12):
        per = {}
        for i in range(8):
            r = rng.random()
            if r < 0.3:
                per[f"g{i}"] = {"reservations": (Reservation(f"t{h}{i}"),)}
            elif r < 0.6:
                per[f"g{i}"] = {"memory_free": rng.randint(12, 79) * GiB}
        links = [nvlink_pairs_links(8), pcie_links(8),
                 {k: LinkInfo(12, v.pcie_level, True) for k, v in nvlink_pairs_links(8).items()}][h % 3]
        hosts.append(host(f"h{h:02d}", 8, links=links, **per))
    f = fleet(*hosts)
    req = SelectionRequest(10 * GiB, count, policy=policy, max_candidates=5)
    got = [(c.host, c.gpu_indexes, c.score) for c in recommend(req, f).candidates]
    every = []
    for hs in f.hosts:
        usable = [g for g in hs.gpus if fits(g, req)]
        if len(usable) < count:
            continue
        view = _HostView(hs, usable, req)
        for members in combinations(view.indexes, count):
            every.append((-view.score(members)[0], hs.name, members))
    every.sort()
    assert got == [(name, m, round(-s, 2)) for s, name, m in every[:5]]


def test_a_better_connection_wins_over_any_fit_or_penalty() -> None:
    # NVLink pair (2, 3) without peer access, breaking nothing, exactly full;
    # PCIe pair (0, 1) under one switch, a perfect fit. NVLink still first.
    links = {(0, 1): LinkInfo(0, "PIX", True), (2, 3): LinkInfo(2, "SYS", False),
             (0, 2): LinkInfo(0, "SYS", True), (0, 3): LinkInfo(0, "SYS", True),
             (1, 2): LinkInfo(0, "SYS", True), (1, 3): LinkInfo(0, "SYS", True)}
    f = fleet(host("a", 4, links=links, g0={"memory_free": 10 * GiB}, g1={"memory_free": 10 * GiB}))
    rec = recommend(SelectionRequest(10 * GiB, 2, max_candidates=3), f)
    assert [c.gpu_indexes for c in rec.candidates[:2]] == [(2, 3), (0, 1)]
    assert "no peer access" in " ".join(rec.candidates[0].reasons)
