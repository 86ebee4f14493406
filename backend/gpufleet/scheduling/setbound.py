"""What a host's best set can score, before its sets are scored: how recommend skips most of a large fleet.

A set's score (``recommend._HostView.score``) has a part that depends only on
how its GPUs are linked (connection class, NVLinks per pair, PXB, peer
access) and a part that depends on the request (fit, NVLink partners left
behind). The first is worked out once per link matrix, for every set of a
size, best first; hosts of one model share one matrix (``types.PairMatrix``).
A host's bound is then the best linked part among the sets its usable GPUs
can form, plus the best fit and the fewest broken partners any set could
have; no set of the host scores above it, so ranking may skip the host once
``max_candidates`` sets score more.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import combinations
from math import comb
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpufleet.scheduling.types import Connection, GPUAvailability, HostState, PairMatrix, SelectionRequest

# Connection classes with the base of their score (see recommend's module doc).
CLASS_BASE: dict[str, float] = {
    "single": 1000.0,
    "nvlink": 1000.0,
    "pcie-switch": 700.0,
    "numa": 400.0,
    "system": 100.0,
}
RANK_CLASS: dict[int, Connection] = {0: "nvlink", 1: "pcie-switch", 2: "numa", 3: "system"}
# Tables of every set are built up to this many sets of one size (8 GPUs: at most 70).
MAX_TABLE = 256
# Rounding: a bound is summed in another order than the score it bounds.
_SLACK = 1e-9


def linked_part(pairs: PairMatrix, members: tuple[int, ...]) -> float:
    """The score of a set of two or more GPUs before fit and broken partners, as ``_HostView.score`` adds it."""
    cls, nvl, peer, pxb = pairs.cls, pairs.nvl, pairs.peer, pairs.pxb
    worst, nvl_sum, far, no_peer = 0, 0, False, False
    for pos, a in enumerate(members):
        for b in members[pos + 1:]:
            worst = max(worst, cls[a][b])
            nvl_sum += nvl[a][b]
            far = far or pxb[a][b]
            no_peer = no_peer or not peer[a][b]
    return link_score(len(members), worst, nvl_sum, far, no_peer)


def link_score(count: int, worst: int, nvl_sum: int, far: bool, no_peer: bool) -> float:
    """The part of a set's score its links decide: the one formula ``recommend`` scores and this module bounds.

    ``worst`` is the worst connection rank between two members (0 NVLink ..
    3 system), ``nvl_sum`` the NVLinks summed over pairs, ``far`` whether a
    pair crosses several PCIe switches (PXB), ``no_peer`` whether a pair
    lacks peer access.
    """
    if count == 1:
        score = CLASS_BASE["single"]
    else:
        score = CLASS_BASE[RANK_CLASS[worst]]
        if worst == 1 and far:
            score -= 40.0  # PIX (one switch) is closer than PXB (several switches)
        if worst == 0:
            score += min(nvl_sum / (count * (count - 1) / 2), 18.0)  # more NVLinks per pair, more bandwidth
    if no_peer:
        score -= 60.0
    return score


def set_table(pairs: PairMatrix, count: int) -> tuple[tuple[float, int], ...] | None:
    """Every set of ``count`` GPU indexes as (linked part, bit mask), best first; None when too many."""
    size = len(pairs.cls)
    tables = pairs.set_tables
    if count not in tables:
        if count > size or comb(size, count) > MAX_TABLE:
            tables[count] = None
        elif count == 1:
            tables[count] = tuple((CLASS_BASE["single"], 1 << i) for i in range(size))
        else:
            rows = [(linked_part(pairs, m), sum(1 << i for i in m)) for m in combinations(range(size), count)]
            rows.sort(key=lambda r: -r[0])
            tables[count] = tuple(rows)
    return tables[count]


def host_bound(pairs: PairMatrix, group: list[GPUAvailability], request: SelectionRequest) -> float | None:
    """No set of ``request.count`` GPUs of ``group`` (one host's usable GPUs) scores more.

    None for one GPU, and where the sets are too many for a table: recommend bounds those itself.
    """
    count = request.count
    # One GPU: every set is "single", so recommend's own cheaper bound is as tight.
    table = set_table(pairs, count) if count > 1 else None
    if table is None:
        return None
    umask = 0
    for g in group:
        umask |= 1 << g.index
    linked = next((part for part, mask in table if mask & umask == mask), None)
    if linked is None:
        return float("-inf")
    need = request.memory_bytes
    lefts = sorted(max(g.free_memory - need, 0) / (g.memory_total or max(g.free_memory, 1)) for g in group)
    if request.policy == "pack":
        fit = 100.0 * (1.0 - sum(lefts[:count]) / count)
        nbr = pairs.nvlink_masks
        fewest = sorted((nbr[g.index] & umask).bit_count() for g in group)[:count]
        fit -= min(5.0 * max(0, sum(fewest) - count * (count - 1)), 60.0)
    else:
        fit = 100.0 * sum(lefts[-count:]) / count
    return linked + fit + _SLACK


def best_linked(pairs: PairMatrix, count: int) -> float:
    """The best linked part any ``count`` GPUs of this link matrix can have."""
    if count == 1:
        return CLASS_BASE["single"]
    table = set_table(pairs, count)
    return table[0][0] if table else max(CLASS_BASE.values()) + 18.0


def host_order(hosts: tuple[HostState, ...], request: SelectionRequest) -> list[tuple[float, str, HostState]]:
    """The hosts where ``request.count`` GPUs could have the memory, each with a bound on its sets'
    scores that needs no GPU looked at, best bound first (ties: by name).

    Free memory of the free (or shared) GPUs, largest first, is kept per host: which GPUs have
    ``need`` free is a bisect, and the best fit any set of them can have follows from it.
    """
    count, need = request.count, request.memory_bytes
    which = 0 if request.exclusive else 1
    pack = request.policy == "pack"
    out = []
    for host in hosts:
        room = host.room[which]
        have = bisect_right(room.neg, -need)  # how many have ``need`` free
        if have < count:
            continue
        linked = best_linked(host.pairs, count) if count > 1 else CLASS_BASE["single"]
        if room.total is None:
            out.append((float("inf"), host.name, host))  # GPUs of several sizes: no cheap bound
            continue
        frees = room.frees[have - count:have] if pack else room.frees[:count]
        share = (sum(frees) - count * need) / (count * room.total)
        out.append((linked + 100.0 * (1.0 - share if pack else share) + _SLACK, host.name, host))
    out.sort(key=lambda e: (-e[0], e[1]))
    return out
