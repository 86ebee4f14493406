"""Is a hand-picked GPU selection usable? ``validate_selection`` lists every problem.

A person who picks GPUs should learn everything wrong with the choice at once,
not one problem per attempt, so nothing here stops at the first problem.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations

from gpufleet.scheduling.recommend import pair_class
from gpufleet.scheduling.types import (
    FleetState,
    GPUAvailability,
    HostState,
    fmt_bytes,
)
from gpufleet.scheduling.vendormix import mixed_vendor_message, unsupported_backend_reason
from gpufleet.scheduling.weights import selection_weights


@dataclass(frozen=True)
class Problem:
    # unknown-host | unknown-gpu | duplicate | busy | foreign-busy | drained |
    # unhealthy | shared | short-of-memory | mixed-vendors | unsupported-backend | no-peer-access | slow-link
    code: str
    message: str
    gpu_index: int | None = None


@dataclass(frozen=True)
class Validation:
    ok: bool
    host: str | None
    gpu_indexes: tuple[int, ...]
    problems: tuple[Problem, ...] = ()
    # Usable, but worth knowing (no peer access, no NVLink, mixed models).
    warnings: tuple[Problem, ...] = ()
    weights: tuple[float, ...] = ()
    gpus: tuple[GPUAvailability, ...] = field(default=(), repr=False)


def _ranges(indexes: Sequence[int]) -> str:
    """``0–3, 6`` for [0, 1, 2, 3, 6]."""
    idx = sorted(indexes)
    if not idx:
        return "none"
    parts, start, prev = [], idx[0], idx[0]
    for i in [*idx[1:], None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        parts.append(str(start) if start == prev else f"{start}–{prev}")
        if i is not None:
            start = prev = i
    return ", ".join(parts)


def validate_selection(
    fleet: FleetState,
    gpu_indexes: Sequence[int],
    *,
    host: str | None = None,
    memory_bytes: int = 0,
    exclusive: bool = True,
) -> Validation:
    """Every problem with running one training on ``gpu_indexes`` of ``host``.

    ``host`` may be omitted when the fleet has a single host. Mixed vendors in
    one job are a problem (NCCL, RCCL and oneCCL do not talk to each other);
    pairs without peer access or without NVLink are warnings.
    """
    indexes = tuple(gpu_indexes)
    host, hstate = _find_host(fleet, host)
    if isinstance(hstate, Problem):
        return Validation(False, host, indexes, (hstate,))
    if not indexes:
        return Validation(False, host, indexes,
                          (Problem("unknown-gpu", "no GPU given; name at least one GPU index"),))
    problems = _duplicates(indexes)
    chosen = _chosen_gpus(hstate, hstate.name, indexes, memory_bytes, exclusive, problems)
    warnings = _vendor_warnings(chosen) + _link_warnings(hstate, chosen)
    weights: tuple[float, ...] = ()
    if len({g.name for g in chosen}) > 1:
        weights = selection_weights(chosen, fleet.measured_speed)
        warnings.append(_mixed_models(chosen, weights))
    return Validation(
        ok=not problems,
        host=host,
        gpu_indexes=indexes,
        problems=tuple(problems),
        warnings=tuple(warnings),
        weights=weights,
        gpus=tuple(chosen),
    )


def _find_host(fleet: FleetState, host: str | None) -> tuple[str | None, HostState | Problem]:
    """The host's name and the host a selection is on (the only one when none is named), or the problem naming it."""
    names = ", ".join(sorted(h.name for h in fleet.hosts)) or "none"
    if host is None:
        if len(fleet.hosts) != 1:
            return None, Problem("unknown-host", f"name the host: the fleet has several ({names})")
        host = fleet.hosts[0].name
    hstate = fleet.host(host)
    if hstate is None:
        return host, Problem("unknown-host", f"host {host!r} is not in the fleet; known hosts: {names}")
    return host, hstate


def _duplicates(indexes: Sequence[int]) -> list[Problem]:
    return [Problem("duplicate", f"GPU {idx} is listed {n} times; a GPU runs one rank", idx)
            for idx, n in sorted(Counter(indexes).items()) if n > 1]


def _chosen_gpus(hstate: HostState, host: str, indexes: Sequence[int], memory_bytes: int, exclusive: bool,
                 problems: list[Problem]) -> list[GPUAvailability]:
    """The named GPUs that exist, in the order named; what is wrong with each goes to ``problems``."""
    by_index = {g.index: g for g in hstate.gpus}
    chosen: list[GPUAvailability] = []
    for idx in dict.fromkeys(indexes):
        gpu = by_index.get(idx)
        if gpu is None:
            problems.append(Problem(
                "unknown-gpu", f"GPU {idx} does not exist on host {host}; it has GPUs {_ranges(list(by_index))}", idx))
            continue
        chosen.append(gpu)
        problems.extend(_gpu_problems(gpu, memory_bytes, exclusive))
    return chosen


def _gpu_problems(gpu: GPUAvailability, memory_bytes: int, exclusive: bool) -> list[Problem]:
    """Why one GPU cannot hold a rank of this training (an unusable GPU: that alone)."""
    idx = gpu.index
    why = unsupported_backend_reason(gpu.backend, gpu.vendor)
    if why is not None:
        return [Problem("unsupported-backend", f"GPU {idx} cannot hold a rank: {why}", idx)]
    if gpu.state in ("busy", "foreign-busy", "drained", "unhealthy"):
        return [Problem(gpu.state, f"GPU {idx} is {gpu.state}: {gpu.reason}", idx)]
    found = []
    if gpu.state == "shared" and exclusive:
        found.append(Problem("shared", f"GPU {idx} is shared ({gpu.reason}); an exclusive training needs it alone",
                             idx))
    if memory_bytes and gpu.free_memory < memory_bytes:
        found.append(Problem(
            "short-of-memory",
            f"GPU {idx} has {fmt_bytes(gpu.free_memory)} free, "
            f"{fmt_bytes(memory_bytes - gpu.free_memory)} short of the {fmt_bytes(memory_bytes)} needed",
            idx,
        ))
    return found


def _vendor_warnings(chosen: Sequence[GPUAvailability]) -> list[Problem]:
    mixed = mixed_vendor_message([g.vendor for g in chosen], [g.name for g in chosen])
    # Usable (engine/parallel.py), at a cost the warning names with the mode gpufleet would use.
    return [] if mixed is None else [Problem("mixed-vendors", mixed)]


def _link_warnings(hstate: HostState, chosen: Sequence[GPUAvailability]) -> list[Problem]:
    """Pairs whose gradients go through host memory or a slow bridge."""
    warnings = []
    for a, b in combinations(chosen, 2):
        link = hstate.link(a.index, b.index)
        if link is None or not link.peer_access:
            warnings.append(Problem(
                "no-peer-access",
                f"GPUs {a.index} and {b.index} have no peer access: gradients go through host memory"))
        elif pair_class(link) >= 2:
            warnings.append(Problem(
                "slow-link",
                f"GPUs {a.index} and {b.index} connect only through the "
                f"{'CPU host bridge' if pair_class(link) == 2 else 'inter-socket link'} ({link.pcie_level})",
            ))
    return warnings


def _mixed_models(chosen: Sequence[GPUAvailability], weights: Sequence[float]) -> Problem:
    return Problem(
        "mixed-models",
        "mixed GPU models; with equal micro-batches the slowest sets the pace, parallel_mode "
        "proportional gives each GPU a share by its speed. Relative speed: "
        + ", ".join(f"GPU {g.index} {w:.2f}" for g, w in zip(chosen, weights)),
    )


def world_size_never_fits(world_size: int, gpus_per_host: Mapping[str, int], host: str | None = None) -> str | None:
    """Why ``world_size`` ranks (one GPU each, on one host) can never be placed, or None.

    ``gpus_per_host`` counts every registered GPU, drained and lost ones too:
    those may come back, a GPU the host does not have will not. With no host
    registered yet nothing is known, so nothing is refused.
    """
    if not gpus_per_host:
        return None
    fleet = ", ".join(f"{name} has {n}" for name, n in sorted(gpus_per_host.items()))
    if host is not None:
        have = gpus_per_host.get(host)
        if have is None or world_size <= have:
            return None
        return (f"world_size {world_size} needs {world_size} GPUs on host {host}, which has {have}; "
                f"ask for at most {have}")
    largest = max(gpus_per_host.values())
    if world_size <= largest:
        return None
    return (f"world_size {world_size} needs {world_size} GPUs on one host and can never run here: "
            f"{fleet} GPU(s); ask for at most {largest}")


def memory_never_fits(memory_bytes: int | None, gpu_memory: Sequence[int | None],
                      where: str = "the fleet") -> str | None:
    """Why one rank needing ``memory_bytes`` can never run on any of these GPUs (their total memory), or None.

    The never-fit rule at create: a training whose memory is beyond the
    largest GPU would queue forever. A fleet with no GPU of known size (none
    registered yet, or CPU only) refuses nothing.
    """
    sizes = [m for m in gpu_memory if m]
    if memory_bytes is None or not sizes or memory_bytes <= max(sizes):
        return None
    return (
        f"one rank needs {fmt_bytes(memory_bytes)}, more than the largest GPU in {where} "
        f"({fmt_bytes(max(sizes))}); make the model or the micro-batch smaller, or use more GPUs with FSDP"
    )

