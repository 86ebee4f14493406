"""Ranked, NVLink-aware GPU sets for a request: ``recommend(request, fleet)``.

A set lives on one host. Sets are ranked first by how their GPUs talk to each
other (all NVLink, then one PCIe switch, then one NUMA node, then across the
system), then by fit: ``pack`` puts a job where it leaves the least memory
idle and keeps NVLink partners of other free GPUs whole, so large GPUs and
connected groups stay free for large jobs; ``spread`` does the opposite.

NUMA placement is not in the inventory: two GPUs whose PCIe path is ``SYS``
cross the inter-socket link and are taken to be on different NUMA nodes;
``NODE`` or anything closer is the same node.
"""

from __future__ import annotations

import heapq
from functools import lru_cache
from itertools import combinations
from math import comb

from gpufleet.devices.device import index_list
from gpufleet.scheduling.setbound import CLASS_BASE, RANK_CLASS, host_bound, host_order, link_score
from gpufleet.scheduling.types import (
    Candidate,
    Connection,
    FleetState,
    GPUAvailability,
    HostState,
    LinkInfo,
    Recommendation,
    SelectionRequest,
    fmt_bytes,
    link_rank,
)
from gpufleet.devices.limits import refusal as share_refusal
from gpufleet.scheduling.vendormix import mixed_vendor_message, unsupported_backend_reason
from gpufleet.scheduling.weights import selection_weights

# Connection classes, best first, with the base of their score (setbound.CLASS_BASE). The gaps
# (300) are wider than everything else a score can gain or lose (fit 0..100,
# NVLink count 0..18, penalties for no peer access 60, PXB 40, broken NVLink
# groups up to 60), so a better connection always wins.
_CLASS_BASE = CLASS_BASE
_RANK_CLASS = RANK_CLASS
_CLASS_WORDS = {
    "nvlink": "all pairs NVLink-connected",
    "pcie-switch": "under one PCIe switch (no NVLink)",
    "numa": "on one NUMA node (PCIe through the host bridge)",
    "system": "across NUMA nodes (PCIe through the inter-socket link)",
}
# Enumerate every set while there are at most this many; grow greedily beyond.
_MAX_ENUMERATED = 256


def pair_class(link: LinkInfo | None) -> int:
    """The connection rank of one pair (0 = NVLink ... 3 = across the system)."""
    return link_rank(link)


def fits(gpu: GPUAvailability, request: SelectionRequest) -> bool:
    # The cheap tests first: most GPUs of a busy fleet fail on their state.
    if gpu.state == "free" or (gpu.state == "shared" and not request.exclusive):
        return (gpu.free_memory >= request.memory_bytes and _backend_ok(gpu.backend, gpu.vendor)
                and (request.exclusive or share_refusal(gpu.backend or "cuda") is None))
    return False


@lru_cache(maxsize=64)
def _backend_ok(backend: str | None, vendor: str | None) -> bool:
    return unsupported_backend_reason(backend, vendor) is None


def _quick_bound(group: list[GPUAvailability], request: SelectionRequest) -> float:
    """A bound on any set's score from these GPUs that costs no link matrix: at least
    :meth:`_HostView.bound` (the best connection's base and bonus, no penalty for broken pairs)."""
    need, count = request.memory_bytes, request.count
    lefts = sorted(max(g.free_memory - need, 0) / (g.memory_total or max(g.free_memory, 1)) for g in group)
    if request.policy == "pack":
        fit = 100.0 * (1.0 - sum(lefts[:count]) / count)
    else:
        fit = 100.0 * sum(lefts[-count:]) / count
    if count == 1:
        return _CLASS_BASE["single"] + fit
    return max(_CLASS_BASE.values()) + 18.0 + fit


class _HostView:
    """One host's usable GPUs with everything a set's score needs.

    Sets are tuples of GPU indexes. The link matrices come from the host
    snapshot (computed once per snapshot, see ``HostState.pairs``); the fit
    figures depend on the request.
    """

    def __init__(self, host: HostState, usable: list[GPUAvailability], request: SelectionRequest,
                 measured: dict | None = None):
        self.host = host
        self.measured = measured or {}
        self.usable = usable
        self.by_index = {g.index: g for g in usable}
        self.request = request
        self.indexes = [g.index for g in usable]
        pairs = host.pairs
        self.cls, self.nvl, self.peer, self.pxb = pairs.cls, pairs.nvl, pairs.peer, pairs.pxb
        # The share of each GPU's memory this job would leave idle.
        need = request.memory_bytes
        size = len(self.cls)
        self.left = [0.0] * size
        self.partners = [0] * size
        for g in usable:
            self.left[g.index] = max(g.free_memory - need, 0) / (g.memory_total or max(g.free_memory, 1))
            row = self.nvl[g.index]
            # NVLink partners each GPU has among the other usable GPUs.
            self.partners[g.index] = sum(1 for j in self.indexes if row[j] > 0)

    def sets(self, count: int) -> list[tuple[int, ...]]:
        n = len(self.usable)
        if comb(n, count) <= _MAX_ENUMERATED:
            return list(combinations(self.indexes, count))
        # Too many to enumerate: grow one set from each GPU, adding the GPU
        # whose worst link to the set is best (ties: the most NVLinks).
        out: set[tuple[int, ...]] = set()
        for seed in self.indexes:
            members = [seed]
            rest = set(self.indexes) - {seed}
            while len(members) < count:
                best = min(
                    rest,
                    key=lambda c: (
                        max(self.cls[c][m] for m in members),
                        -sum(self.nvl[c][m] for m in members),
                        c,
                    ),
                )
                members.append(best)
                rest.discard(best)
            out.add(tuple(sorted(members)))
        return sorted(out)

    def bound(self, count: int) -> float:
        """No set of ``count`` of these GPUs can score more than this."""
        lefts = sorted(self.left[i] for i in self.indexes)
        if self.request.policy == "pack":
            fit = 100.0 * (1.0 - sum(lefts[:count]) / count)
            # At least this many NVLink partners stay behind: each member's
            # partners, less the links inside the set (at most count - 1 each).
            fewest = sorted(self.partners[i] for i in self.indexes)[:count]
            fit -= min(5.0 * max(0, sum(fewest) - count * (count - 1)), 60.0)
        else:
            fit = 100.0 * sum(lefts[-count:]) / count
        if count == 1:
            return _CLASS_BASE["single"] + fit
        # Any set holds a pair, and its worst pair is no better than the best pair here.
        pairs = list(combinations(self.indexes, 2))
        best_rank = min(self.cls[a][b] for a, b in pairs)
        bonus = min(max(self.nvl[a][b] for a, b in pairs), 18) if best_rank == 0 else 0.0
        return _CLASS_BASE[_RANK_CLASS[best_rank]] + bonus + fit

    def score(self, members: tuple[int, ...]) -> tuple[float, int, float, int, bool]:
        """(score, class, mean idle share, broken NVLink partners, peer access missing)."""
        count = len(members)
        if count == 1:
            m = members[0]
            left, broken = self.left[m], self.partners[m]
            if self.request.policy == "pack":
                return _CLASS_BASE["single"] + 100.0 * (1.0 - left) - min(5.0 * broken, 60.0), 0, left, broken, False
            return _CLASS_BASE["single"] + 100.0 * left, 0, left, broken, False
        worst = 0
        nvl_sum = 0
        inner_links = 0
        far = False
        no_peer = False
        for pos, a in enumerate(members):
            cls_a, nvl_a, peer_a, pxb_a = self.cls[a], self.nvl[a], self.peer[a], self.pxb[a]
            for b in members[pos + 1 :]:
                if cls_a[b] > worst:
                    worst = cls_a[b]
                nv = nvl_a[b]
                nvl_sum += nv
                if nv:
                    inner_links += 1
                if pxb_a[b]:
                    far = True
                if not peer_a[b]:
                    no_peer = True
        score = link_score(count, worst, nvl_sum, far, no_peer)
        mean_left = sum(self.left[m] for m in members) / count
        broken = sum(self.partners[m] for m in members) - 2 * inner_links
        if self.request.policy == "pack":
            # Taking a GPU whose NVLink partner stays free breaks a connected
            # group another job could have used.
            score += 100.0 * (1.0 - mean_left) - min(5.0 * broken, 60.0)
        else:
            score += 100.0 * mean_left
        return score, worst, mean_left, broken, no_peer


def _candidate(view: _HostView, members: tuple[int, ...]) -> Candidate:
    """The full candidate, with its reasons in words (built only for the winners)."""
    score, cls, mean_left, broken, no_peer = view.score(members)
    gpus = [view.by_index[m] for m in members]
    count = len(members)
    if count == 1:
        connection: Connection = "single"
        reasons = [f"GPU {gpus[0].index} has {fmt_bytes(gpus[0].free_memory)} free"]
        if not view.request.exclusive:
            reasons.insert(0, _as_share(gpus[0], view.request.memory_bytes))
    else:
        connection = _RANK_CLASS[cls]
        idx = index_list((g.index for g in gpus), ", ")
        reasons = [f"GPUs {idx} {_CLASS_WORDS[connection]}"]
    if no_peer:
        missing = [
            f"{a}-{b}"
            for a, b in combinations(members, 2)
            if not view.peer[a][b]
        ]
        reasons.append(f"no peer access between GPUs {', '.join(missing[:3])}: transfers go through host memory")
    if view.request.policy == "pack":
        if broken == 0 and len(view.usable) > count:
            reasons.append("keeps the other free GPUs' NVLink groups whole")
        reasons.append(f"best fit: {_memory_left(mean_left, count)}")
    else:
        reasons.append(f"spread: {_memory_left(mean_left, count)}")
    weights = selection_weights(gpus, view.measured) if len({g.name for g in gpus}) > 1 else ()
    if weights:
        reasons.append(
            "mixed GPU models; relative speed "
            + ", ".join(f"GPU {g.index}: {w:.2f}" for g, w in zip(gpus, weights))
        )
    return Candidate(
        host=view.host.name,
        gpu_indexes=tuple(g.index for g in gpus),
        score=round(score, 2),
        connection=connection,
        reasons=tuple(reasons),
        free_memory=tuple(g.free_memory for g in gpus),
        weights=weights,
    )


def _as_share(gpu: GPUAvailability, memory: int) -> str:
    """``fits as a share of 10 GiB beside 2 others``: the GPU's other holders (shares and foreign processes)."""
    others = len(gpu.holders)
    beside = "alone, for now" if others == 0 else f"beside {others} other{'s' if others > 1 else ''}"
    return f"fits as a share of {fmt_bytes(memory)} {beside}"


def _memory_left(mean_left: float, count: int) -> str:
    """What the job leaves of its GPUs' memory, in words (the share still free beside it once it runs)."""
    each = "the GPU's" if count == 1 else "each GPU's"
    if mean_left >= 0.995:
        return f"it needs under 1% of {each} memory"
    if mean_left < 0.005:
        return f"it fills {each} memory"
    return f"{mean_left:.0%} of {each} memory stays free beside it" + ("" if count == 1 else " on average")


def never_fits(request: SelectionRequest, fleet: FleetState) -> str | None:
    """Why no state of the fleet could ever hold this request, or None."""
    hosts = fleet.hosts
    if request.host is not None:
        host = fleet.host(request.host)
        if host is None:
            known = ", ".join(sorted(h.name for h in fleet.hosts)) or "none"
            return f"host {request.host!r} is not in the fleet; known hosts: {known}"
        hosts = (host,)
    if request.host is None and fleet.sizes.fits(request.count, request.memory_bytes):
        return None  # the usual answer, from the fleet's sizes kept per snapshot (no GPU looked at)
    if not any(h.gpus for h in hosts):
        where = f"host {request.host}" if request.host else "the fleet"
        return f"{where} has no GPUs"
    largest_host = max(len(h.gpus) for h in hosts)
    if request.count > largest_host:
        where = f"host {request.host} has" if request.host else "the largest host has"
        return f"needs {request.count} GPUs on one host; {where} {largest_host}"
    largest_gpu = max((g.memory_total or 0) for h in hosts for g in h.gpus)
    if request.memory_bytes > largest_gpu:
        where = f"on host {request.host}" if request.host else "in the fleet"
        return (
            f"needs {fmt_bytes(request.memory_bytes)} per GPU; the largest GPU {where} "
            f"has {fmt_bytes(largest_gpu)}"
        )
    big_enough = [
        sum(1 for g in h.gpus if (g.memory_total or 0) >= request.memory_bytes) for h in hosts
    ]
    if max(big_enough) < request.count:
        return (
            f"needs {request.count} GPUs with {fmt_bytes(request.memory_bytes)} each on one host; "
            f"at most {max(big_enough)} GPUs of that size share a host"
        )
    return None


def _wait_reason(request: SelectionRequest, hosts: tuple[HostState, ...]) -> str:
    need = (
        f"needs {request.count} GPU{'s' if request.count > 1 else ''} with "
        f"{fmt_bytes(request.memory_bytes)} free"
        + (" on one host" if request.count > 1 else "")
    )
    best: tuple[int, HostState] | None = None
    for h in hosts:
        n = sum(1 for g in h.gpus if fits(g, request))
        if best is None or n > best[0]:
            best = (n, h)
    if best is None:
        return need
    n, host = best
    have = "none" if n == 0 else ("one" if n == 1 else str(n))
    blocked = [
        f"GPU {g.index} {g.state}: {g.reason}" if not g.usable else
        f"GPU {g.index}: {refused}" if not request.exclusive and (refused := share_refusal(g.backend or "cuda")) else
        f"GPU {g.index} has {fmt_bytes(g.free_memory)} free"
        for g in host.gpus
        if not fits(g, request)
    ]
    detail = "; ".join(blocked[:3]) + ("; …" if len(blocked) > 3 else "")
    return f"{need}; host {host.name} has {have} free" + (f" ({detail})" if detail else "")


def _nothing_fits(request: SelectionRequest, hosts: tuple[HostState, ...]) -> str:
    """Why no host has ``request.count`` usable GPUs of one vendor, in words."""
    for host in hosts:
        usable = [g for g in host.gpus if fits(g, request)]
        if len(usable) >= request.count:  # enough GPUs, but of several vendors
            return (f"host {host.name} has {request.count} free GPUs only across vendors; "
                    f"{mixed_vendor_message([g.vendor for g in usable])}. "
                    "To run across vendors, name the GPUs (gpu_ids)")
    return _wait_reason(request, hosts)


def recommend(request: SelectionRequest, fleet: FleetState) -> Recommendation:
    """Rank the GPU sets that can take ``request`` now.

    Returns ``refused`` when the request can never fit (the API answers 4xx and
    the scheduler fails the training at once), ``wait_reason`` when nothing fits
    now, or up to ``request.max_candidates`` candidates, best first.
    """
    refused = never_fits(request, fleet)
    if refused is not None:
        return Recommendation(request=request, refused=refused)
    # A host the request names is in the fleet (never_fits refused any other).
    hosts = fleet.hosts if request.host is None else tuple(h for h in fleet.hosts if h.name == request.host)
    measured = dict(fleet.measured_speed)
    # Each host's best possible score bounds what its sets can reach; hosts
    # are scored best bound first, and once the k-th best set beats a host's
    # bound, that host (and every later one) cannot change the answer.
    # Cheap bounds first (setbound.host_order: no GPU looked at); a host's exact bound and sets only
    # while it may still matter.
    k, count = request.max_candidates, request.count
    # A heap of the best k so far, worst on top: (score, reversed tie-break).
    best: list[tuple[float, _Rev, tuple[int, ...], _HostView]] = []
    any_view = False
    for first_bound, name, host in host_order(hosts, request):
        if len(best) >= k and best[0][0] > first_bound:
            break  # sorted by this bound: no later host can place a set among the best k
        usable = [g for g in host.gpus if fits(g, request)]
        # A set the server picks is of one vendor (scheduling/vendormix.py): each vendor's GPUs are their
        # own view. Across vendors a training runs only where the request names the GPUs.
        for vendor in sorted({g.vendor for g in usable}):
            group = [g for g in usable if g.vendor == vendor]
            if len(group) < count:
                continue
            any_view = True
            bound = host_bound(host.pairs, group, request)
            if len(best) >= k and best[0][0] > (_quick_bound(group, request) if bound is None else bound):
                continue
            view = _HostView(host, group, request, measured)
            if bound is None and len(best) >= k and best[0][0] > view.bound(count):
                continue
            score = view.score
            for members in view.sets(count):
                entry = (score(members)[0], _Rev((name, members)), members, view)
                if len(best) < k:
                    heapq.heappush(best, entry)
                elif entry[:2] > best[0][:2]:
                    heapq.heapreplace(best, entry)
    if not any_view:
        return Recommendation(request=request, wait_reason=_nothing_fits(request, hosts))
    ranked = sorted(best, key=lambda e: e[:2], reverse=True)
    return Recommendation(request=request,
                          candidates=tuple(_candidate(view, members) for _, _, members, view in ranked))


class _Rev:
    """Orders (host, indexes) backwards, so that among equal scores the first by name ranks higher."""

    __slots__ = ("key",)

    def __init__(self, key: tuple) -> None:
        self.key = key

    def __lt__(self, other: _Rev) -> bool:
        return self.key > other.key

    def __gt__(self, other: _Rev) -> bool:
        return self.key < other.key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Rev) and self.key == other.key
