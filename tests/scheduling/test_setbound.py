"""A host's bound is never below the score of one of its sets, and it is tight where links differ.

recommend skips a host once ``max_candidates`` sets score more than its bound,
so a bound below a set's real score would drop that set from the answer.
"""

from __future__ import annotations

import random
from itertools import combinations

from gpufleet.scheduling.availability import assess_gpu
from gpufleet.scheduling.recommend import _HostView, recommend
from gpufleet.scheduling.setbound import host_bound
from gpufleet.scheduling.types import (
    FleetState,
    GiB,
    GPUObservation,
    HostState,
    LinkInfo,
    Reservation,
    SelectionRequest,
)


def _links(rng: random.Random, n: int) -> dict[tuple[int, int], LinkInfo]:
    out = {}
    for a, b in combinations(range(n), 2):
        if rng.random() < 0.85:
            out[(a, b)] = LinkInfo(rng.choice([0, 0, 2, 4, 18]), rng.choice(["PIX", "PXB", "NODE", "SYS", None]),
                                   rng.random() < 0.8)
    return out


def _host(rng: random.Random, name: str, n: int) -> HostState:
    gpus = []
    for i in range(n):
        total = rng.choice([48, 80]) * GiB
        held = (Reservation(f"t-{name}-{i}"),) if rng.random() < 0.3 else ()
        gpus.append(assess_gpu(GPUObservation(host=name, index=i, memory_total=total, reservations=held,
                                              memory_free=total - rng.randint(0, 30) * GiB)))
    return HostState(name, tuple(gpus), _links(rng, n))


def test_no_set_scores_above_its_hosts_bound() -> None:
    rng = random.Random(7)
    for trial in range(150):
        h = _host(rng, f"h{trial}", rng.choice([2, 4, 8]))
        req = SelectionRequest(rng.choice([1, 10, 30]) * GiB, count=rng.randint(2, 4),
                               policy=rng.choice(["pack", "spread"]))
        group = [g for g in h.gpus if g.state == "free" and g.free_memory >= req.memory_bytes]
        if len(group) < req.count:
            continue
        bound = host_bound(h.pairs, group, req)
        view = _HostView(h, group, req)
        best = max(view.score(m)[0] for m in view.sets(req.count))
        assert bound is not None and best <= bound
        assert bound <= view.bound(req.count) + 1e-6  # never looser than the view's own bound


def test_a_host_without_nvlink_is_bounded_by_its_pcie_score() -> None:
    pcie = {(a, b): LinkInfo(0, "PIX", True) for a, b in combinations(range(4), 2)}
    h = HostState("p", tuple(assess_gpu(GPUObservation(host="p", index=i, memory_total=80 * GiB,
                                                       memory_free=80 * GiB)) for i in range(4)), pcie)
    req = SelectionRequest(10 * GiB, count=2)
    assert host_bound(h.pairs, list(h.gpus), req) < 1000  # the NVLink class's base is out of its reach


def test_the_answer_is_the_same_as_scoring_every_host() -> None:
    rng = random.Random(11)
    hosts = tuple(_host(rng, f"n{i:02d}", 8) for i in range(40))
    fleet = FleetState(hosts)
    for count in (1, 2, 3, 4):
        req = SelectionRequest(10 * GiB, count=count, max_candidates=5)
        every = sorted(((view.score(m)[0], h.name, m) for h in hosts
                        if len(group := [g for g in h.gpus if g.state == "free" and g.free_memory >= req.memory_bytes])
                        >= count for view in [_HostView(h, group, req)] for m in view.sets(count)),
                       key=lambda e: (-e[0], e[1], e[2]))[:5]
        got = [(c.host, c.gpu_indexes) for c in recommend(req, fleet).candidates]
        assert got == [(name, m) for _, name, m in every]
