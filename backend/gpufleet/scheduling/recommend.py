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

from itertools import combinations
from math import comb

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
)
from gpufleet.scheduling.weights import selection_weights

# Connection classes, best first, with the base of their score. The gaps are
# wider than any fit bonus, so a better connection always wins.
_CLASS_BASE: dict[str, float] = {
    "single": 1000.0,
    "nvlink": 1000.0,
    "pcie-switch": 800.0,
    "numa": 600.0,
    "system": 400.0,
}
_CLASS_RANK = {"nvlink": 0, "pcie-switch": 1, "numa": 2, "system": 3}
_RANK_CLASS = {v: k for k, v in _CLASS_RANK.items()}
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
    if link is None:
        return 3
    if link.nvlink_count > 0:
        return 0
    level = (link.pcie_level or "").upper()
    if level in ("SAME", "PIX", "PXB"):
        return 1
    if level in ("PHB", "NODE"):
        return 2
    return 3


def _fits(gpu: GPUAvailability, request: SelectionRequest) -> bool:
    if gpu.state == "free" or (gpu.state == "shared" and not request.exclusive):
        return gpu.free_memory >= request.memory_bytes
    return False


class _HostView:
    """Pair classes of one host's usable GPUs, computed once per request."""

    def __init__(self, host: HostState, usable: list[GPUAvailability], measured: dict | None = None):
        self.host = host
        self.measured = measured or {}
        self.usable = usable
        n = len(usable)
        self.cls = [[0] * n for _ in range(n)]
        self.nvl = [[0] * n for _ in range(n)]
        self.peer = [[True] * n for _ in range(n)]
        for i in range(n):
            for j in range(i + 1, n):
                link = host.link(usable[i].index, usable[j].index)
                c = pair_class(link)
                self.cls[i][j] = self.cls[j][i] = c
                nv = link.nvlink_count if link else 0
                self.nvl[i][j] = self.nvl[j][i] = nv
                ok = bool(link and link.peer_access)
                self.peer[i][j] = self.peer[j][i] = ok

    def set_class(self, members: tuple[int, ...]) -> int:
        worst = 0
        cls = self.cls
        for a_pos, a in enumerate(members):
            row = cls[a]
            for b in members[a_pos + 1 :]:
                if row[b] > worst:
                    worst = row[b]
                    if worst == 3:
                        return 3
        return worst

    def sets(self, count: int) -> list[tuple[int, ...]]:
        n = len(self.usable)
        if comb(n, count) <= _MAX_ENUMERATED:
            return list(combinations(range(n), count))
        # Too many to enumerate: grow one set from each GPU, adding the GPU
        # whose worst link to the set is best (ties: the most NVLinks).
        out: set[tuple[int, ...]] = set()
        for seed in range(n):
            members = [seed]
            rest = set(range(n)) - {seed}
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


def _score(view: _HostView, members: tuple[int, ...], request: SelectionRequest) -> Candidate:
    usable = view.usable
    gpus = [usable[m] for m in members]
    count = len(members)
    if count == 1:
        connection: Connection = "single"
        reasons = [f"GPU {gpus[0].index} has {fmt_bytes(gpus[0].free_memory)} free"]
        cls = 0
    else:
        cls = view.set_class(members)
        connection = _RANK_CLASS[cls]  # type: ignore[assignment]
        idx = ", ".join(str(g.index) for g in gpus)
        reasons = [f"GPUs {idx} {_CLASS_WORDS[connection]}"]
    score = _CLASS_BASE[connection]

    if count > 1 and cls == 1:
        # PIX (one switch) is closer than PXB (several switches).
        levels = [
            (view.host.link(a.index, b.index) or LinkInfo()).pcie_level
            for a, b in combinations(gpus, 2)
        ]
        if any((lv or "").upper() == "PXB" for lv in levels):
            score -= 40.0
    if count > 1 and cls == 0:
        # More NVLinks per pair = more bandwidth for the all-reduce.
        pairs = list(combinations(members, 2))
        mean_links = sum(view.nvl[a][b] for a, b in pairs) / len(pairs)
        score += min(mean_links, 18.0)

    missing_peer = [
        (usable[a].index, usable[b].index)
        for a, b in combinations(members, 2)
        if not view.peer[a][b]
    ]
    if missing_peer:
        score -= 60.0
        shown = ", ".join(f"{a}-{b}" for a, b in missing_peer[:3])
        reasons.append(f"no peer access between GPUs {shown}: transfers go through host memory")

    # Fit: the share of each GPU's memory this job leaves idle.
    leftover = []
    for g in gpus:
        total = g.memory_total or max(g.free_memory, 1)
        leftover.append(max(g.free_memory - request.memory_bytes, 0) / total)
    mean_left = sum(leftover) / count
    if request.policy == "pack":
        score += 100.0 * (1.0 - mean_left)
        # Taking a GPU whose NVLink partner stays free breaks a connected
        # group another job could have used.
        chosen = set(members)
        broken = sum(
            1
            for m in members
            for other in range(len(usable))
            if other not in chosen and view.nvl[m][other] > 0
        )
        score -= min(5.0 * broken, 60.0)
        if broken == 0 and len(usable) > count:
            reasons.append("keeps the other free GPUs' NVLink groups whole")
        reasons.append(f"best fit: leaves {mean_left:.0%} of each GPU's memory idle on average")
    else:
        score += 100.0 * mean_left
        reasons.append(f"spread: leaves {mean_left:.0%} of each GPU's memory free on average")

    names = {g.name for g in gpus}
    weights = selection_weights(gpus, view.measured) if len(names) > 1 else ()
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


def never_fits(request: SelectionRequest, fleet: FleetState) -> str | None:
    """Why no state of the fleet could ever hold this request, or None."""
    hosts = fleet.hosts
    if request.host is not None:
        host = fleet.host(request.host)
        if host is None:
            known = ", ".join(sorted(h.name for h in fleet.hosts)) or "none"
            return f"host {request.host!r} is not in the fleet; known hosts: {known}"
        hosts = (host,)
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
        n = sum(1 for g in h.gpus if _fits(g, request))
        if best is None or n > best[0]:
            best = (n, h)
    if best is None:
        return need
    n, host = best
    have = "none" if n == 0 else ("one" if n == 1 else str(n))
    blocked = [
        f"GPU {g.index} {g.state}: {g.reason}" if not g.usable else
        f"GPU {g.index} has {fmt_bytes(g.free_memory)} free"
        for g in host.gpus
        if not _fits(g, request)
    ]
    detail = "; ".join(blocked[:3]) + ("; …" if len(blocked) > 3 else "")
    return f"{need}; host {host.name} has {have} free" + (f" ({detail})" if detail else "")


def recommend(request: SelectionRequest, fleet: FleetState) -> Recommendation:
    """Rank the GPU sets that can take ``request`` now.

    Returns ``refused`` when the request can never fit (the API answers 4xx and
    the scheduler fails the training at once), ``wait_reason`` when nothing fits
    now, or up to ``request.max_candidates`` candidates, best first.
    """
    refused = never_fits(request, fleet)
    if refused is not None:
        return Recommendation(request=request, refused=refused)
    hosts = fleet.hosts if request.host is None else (fleet.host(request.host),)  # type: ignore[assignment]
    measured = dict(fleet.measured_speed)
    candidates: list[Candidate] = []
    for host in hosts:
        usable = [g for g in host.gpus if _fits(g, request)]
        if len(usable) < request.count:
            continue
        view = _HostView(host, usable, measured)
        for members in view.sets(request.count):
            candidates.append(_score(view, members, request))
    if not candidates:
        return Recommendation(request=request, wait_reason=_wait_reason(request, hosts))
    candidates.sort(key=lambda c: (-c.score, c.host, c.gpu_indexes))
    return Recommendation(request=request, candidates=tuple(candidates[: request.max_candidates]))


def choose_for_scheduler(
    free: list[int],
    count: int,
    memory: int | None,
    *,
    host_name: str,
    settings,  # noqa: ANN001 - gpufleet.config.Settings; untyped to keep this module pure
) -> tuple[list[int], str] | None:
    """The jobs scheduler's hook: the best ``count`` of ``free`` GPUs on ``host_name``.

    ``free`` are the GPUs the scheduler's own bookkeeping found free; this adds
    what it cannot see (foreign processes, live free memory, NVLink). Returns
    ``(indexes, reason)``, or None when no set of ``free`` GPUs is usable here.
    """
    from gpufleet.db.session import session_scope
    from gpufleet.scheduling.inputs import fleet_state

    with session_scope(settings) as sess:
        fleet = fleet_state(sess, settings, host=host_name)
    host = fleet.host(host_name)
    if host is None:
        return None
    allowed = set(free)
    only = HostState(host.name, tuple(g for g in host.gpus if g.index in allowed), host.links)
    rec = recommend(
        SelectionRequest(memory_bytes=memory or 0, count=count, host=host_name),
        FleetState(hosts=(only,), measured_speed=fleet.measured_speed),
    )
    if rec.top is None:
        return None
    return list(rec.top.gpu_indexes), "; ".join(rec.top.reasons)
