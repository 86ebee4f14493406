"""GPU sets across hosts, for a request no single host can hold now.

Pure, like :mod:`.recommend`: ranked by fewest hosts, then by how well each
host's part is linked inside the host (NVLink first), then by the parts' own
scores; each host's part is the best set :func:`.recommend.recommend` finds on
that host. ``validate_across`` checks a selection of several hosts' GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import combinations

from gpufleet.scheduling.recommend import fits, recommend
from gpufleet.scheduling.types import Candidate, FleetState, SelectionRequest, fmt_bytes
from gpufleet.scheduling.validate import validate_selection
from gpufleet.scheduling.vendormix import mixed_vendor_message

# Hosts beyond the emptiest dozen cannot be in a fewest-hosts answer that matters.
_CONSIDER = 12
_LINK_RANK = {"single": 0, "nvlink": 0, "pcie-switch": 1, "numa": 2, "system": 3}
_LINK_WORDS = {"single": "1 GPU", "nvlink": "NVLink", "pcie-switch": "PCIe switch", "numa": "PCIe (NUMA)",
               "system": "across the CPU link"}


@dataclass(frozen=True)
class AcrossCandidate:
    parts: tuple[Candidate, ...]
    reasons: tuple[str, ...]

    @property
    def hosts(self) -> int:
        return len(self.parts)


def _split(count: int, free: list[int]) -> list[int] | None:
    """GPUs per host: even when it can be, else the emptiest host takes the most."""
    n = len(free)
    if count % n == 0 and all(f >= count // n for f in free):
        return [count // n] * n
    out, left = [], count
    for f in free:
        take = min(f, left)
        out.append(take)
        left -= take
    return out if left == 0 and all(out) else None


def recommend_across(request: SelectionRequest, fleet: FleetState) -> tuple[list[AcrossCandidate], str | None]:
    """Sets on the fewest hosts that hold ``request.count`` GPUs now; or none and why."""
    free = {h.name: [g for g in h.gpus if fits(g, request)] for h in fleet.hosts}
    total = sum(len(v) for v in free.values())
    each = ", ".join(f"{h}: {len(v)}" for h, v in sorted(free.items()))
    if total < request.count:
        return [], (f"needs {request.count} GPUs with {fmt_bytes(request.memory_bytes)} free across hosts; "
                    f"the fleet has {total} ({each})")
    order = sorted(free, key=lambda h: (-len(free[h]), h))[:_CONSIDER]
    need, acc = 0, 0
    for h in order:
        need, acc = need + 1, acc + len(free[h])
        if acc >= request.count:
            break
    found: list[tuple[tuple, AcrossCandidate]] = []
    for n in (need, need + 1):
        for combo in combinations(order, n):
            sizes = _split(request.count, [len(free[h]) for h in combo])
            if sizes is None:
                continue
            parts = []
            for host, k in zip(combo, sizes):
                rec = recommend(replace(request, count=k, host=host, max_candidates=1), fleet)
                if not rec.candidates:
                    break
                parts.append(rec.candidates[0])
            else:
                words = " + ".join(f"{p.host}: {len(p.gpu_indexes)} {_LINK_WORDS.get(p.connection, p.connection)}"
                                   for p in parts)
                reasons = (f"no host has {request.count} free GPUs", f"{words} over the network")
                key = (n, sum(_LINK_RANK.get(p.connection, 3) for p in parts), -sum(p.score for p in parts))
                found.append((key, AcrossCandidate(tuple(parts), reasons)))
        if found:
            break
    found.sort(key=lambda x: x[0])
    if not found:
        return [], f"no split of {request.count} GPUs over the hosts fits now ({each} free)"
    return [c for _, c in found[:request.max_candidates]], None


def validate_across(fleet: FleetState, parts: list[tuple[str, list[int]]], *, memory_bytes: int,
                    exclusive: bool = True) -> tuple[bool, list[tuple[str, str, int | None]],
                                                     list[tuple[str, str, int | None]]]:
    """Every host's part checked as a one-host selection, plus what spans them; (ok, problems, warnings)."""
    problems: list[tuple[str, str, int | None]] = []
    warnings: list[tuple[str, str, int | None]] = []
    hosts = [h for h, _ in parts]
    dup = sorted({h for h in hosts if hosts.count(h) > 1})
    if dup:
        problems.append(("duplicate_host", f"host {dup[0]} is listed twice; give each host once", None))
    vendors = []
    for host, ids in parts:
        v = validate_selection(fleet, ids, host=host, memory_bytes=memory_bytes, exclusive=exclusive)
        problems += [(p.code, f"host {host}: {p.message}", p.gpu_index) for p in v.problems]
        warnings += [(p.code, f"host {host}: {p.message}", p.gpu_index) for p in v.warnings]
        state = fleet.host(host)
        if state is not None:
            vendors += [g.vendor for g in state.gpus if g.index in ids]
    mixed = mixed_vendor_message(vendors)
    if mixed:
        problems.append(("mixed_vendors", mixed, None))
    if len(parts) > 1:
        warnings.append(("across_hosts", f"{len(parts)} hosts: gradients cross the network every step "
                                         "(docs/scaling.md); every host needs the shared checkpoint root", None))
    return not problems, problems, warnings
