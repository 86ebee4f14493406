"""Plain dataclasses that GPU selection takes and returns.

Nothing here knows HTTP, Celery or the database schema: the API route and the
jobs scheduler gather these from the database and the live samples
(``gpufleet.scheduling.inputs``) and call the pure functions in
``availability``, ``recommend`` and ``validate``. Memory is always in bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any, Literal

GiB = 1024**3
MiB = 1024**2

AvailabilityState = Literal["free", "shared", "busy", "foreign-busy", "drained", "unhealthy"]
# How the GPUs of a set talk to each other, best first.
Connection = Literal["single", "nvlink", "pcie-switch", "numa", "system"]
Policy = Literal["pack", "spread"]


def fmt_bytes(n: int | float | None) -> str:
    """Memory in words, e.g. ``11.2 GiB`` or ``512 MiB``."""
    if n is None:
        return "unknown"
    if abs(n) >= GiB:
        return f"{n / GiB:.1f} GiB"
    if abs(n) >= MiB or n == 0:
        return f"{n / MiB:.0f} MiB"
    return f"{n / 1024:.0f} KiB"


def fmt_bytes_apart(a: int, b: int) -> tuple[str, str]:
    """Two figures in words, with enough decimals that unequal ones read differently (not "1.0 GiB over 1.0 GiB")."""
    for digits in (1, 2, 3):
        unit, div = ("GiB", GiB) if max(abs(a), abs(b)) >= GiB else ("MiB", MiB)
        x, y = f"{a / div:.{digits}f} {unit}", f"{b / div:.{digits}f} {unit}"
        if x != y or a == b:
            return x, y
    return fmt_bytes(a), f"{fmt_bytes(b)} (less by {fmt_bytes(a - b) if a - b >= 1024 else f'{a - b} B'})"


@dataclass(frozen=True)
class LinkInfo:
    """One pair of GPUs on a host, as ``gpu_links`` / ``Topology`` hold it."""

    nvlink_count: int = 0
    # nvidia-smi topo levels: SAME, PIX, PXB, PHB, NODE, SYS (None = unknown).
    pcie_level: str | None = None
    peer_access: bool = False


@dataclass(frozen=True)
class ProcessInfo:
    """A process on a GPU (from the live sample)."""

    pid: int
    used_memory: int | None = None
    user: str | None = None
    command: str | None = None
    training_id: str | None = None
    # True when gpufleet did not start it.
    foreign: bool = True


@dataclass(frozen=True)
class Reservation:
    """An active ``gpu_allocations`` row: a gpufleet training holds the GPU."""

    training_id: str
    exclusive: bool = True
    reserved_memory: int | None = None
    training_name: str | None = None
    owner: str | None = None
    kind: str = "recipe"  # recipe | script | session: what the holder is called


@dataclass(frozen=True)
class GPUObservation:
    """Everything known about one GPU now: inventory, live sample, reservations."""

    host: str
    index: int
    vendor: str = "nvidia"
    name: str = ""
    memory_total: int | None = None
    backend: str = ""  # cuda | hip | xpu as the inventory says; "" when not known
    # The device's own view; None when no live sample is available.
    memory_free: int | None = None
    utilization: float | None = None
    # Recent utilization samples (oldest first), to tell sustained load from a blip.
    recent_utilization: tuple[float, ...] = ()
    processes: tuple[ProcessInfo, ...] = ()
    reservations: tuple[Reservation, ...] = ()
    compute_capability: str | None = None
    drained: bool = False
    drain_reason: str | None = None
    # Inventory status: ok | missing | unhealthy.
    status: str = "ok"
    status_reason: str | None = None
    lost: bool = False
    # Errors that appeared since the GPU was last known good.
    new_ecc_errors: int = 0
    new_xid_errors: int = 0
    # The host's agent stopped reporting (hosts.status offline).
    host_offline: bool = False


@dataclass(frozen=True)
class AvailabilityPolicy:
    """Thresholds that turn observations into states; validates itself."""

    # A foreign process holding more than this makes the GPU foreign-busy.
    foreign_memory_threshold: int = 1 * GiB
    # Utilization by someone else above this for ``sustained_samples`` samples.
    foreign_utilization_threshold: float = 50.0
    sustained_samples: int = 5
    max_models_per_gpu: int = 4

    def __post_init__(self) -> None:
        if self.foreign_memory_threshold < 0:
            raise ValueError("foreign_memory_threshold must be >= 0 bytes")
        if not 0 <= self.foreign_utilization_threshold <= 100:
            raise ValueError("foreign_utilization_threshold must be a percentage (0-100)")
        if self.sustained_samples < 1:
            raise ValueError("sustained_samples must be >= 1")
        if self.max_models_per_gpu < 1:
            raise ValueError("max_models_per_gpu must be >= 1")


@dataclass(frozen=True)
class GPUAvailability:
    """One GPU's state, with the reason in words and the memory gpufleet may still give."""

    host: str
    index: int
    state: AvailabilityState
    reason: str
    vendor: str = "nvidia"
    name: str = ""
    memory_total: int | None = None
    backend: str = ""
    # Device-reported free memory minus what gpufleet has reserved but not yet used.
    free_memory: int = 0
    reserved_memory: int = 0
    # Who is on the GPU: {"training_id", "name", "owner", "exclusive", "reserved_memory"}
    # for gpufleet trainings, {"pid", "user", "command", "used_memory", "foreign": True}
    # for processes gpufleet did not start.
    holders: tuple[dict[str, Any], ...] = ()
    compute_capability: str | None = None

    @property
    def usable(self) -> bool:
        return self.state in ("free", "shared")


@dataclass(frozen=True)
class HostState:
    name: str
    gpus: tuple[GPUAvailability, ...]
    # Keyed (a, b) with a < b by GPU index.
    links: Mapping[tuple[int, int], LinkInfo] = field(default_factory=dict)

    def link(self, a: int, b: int) -> LinkInfo | None:
        return self.links.get((a, b) if a < b else (b, a))

    @cached_property
    def pairs(self) -> PairMatrix:
        """Link matrices by GPU index, computed once per snapshot (recommend reads them)."""
        return PairMatrix.of(self)

    @cached_property
    def room(self) -> tuple[Room, Room]:
        """What the free GPUs, and the free or shared ones, have free (``recommend`` bounds hosts by it)."""
        return Room.of([g for g in self.gpus if g.state == "free"]), \
            Room.of([g for g in self.gpus if g.state in ("free", "shared")])


@dataclass(frozen=True)
class Room:
    """Free memory of some GPUs of a host, largest first (``neg``: negated, for bisect), and
    their memory size when they all have the same (else None)."""

    frees: tuple[int, ...]
    neg: tuple[int, ...]
    total: int | None

    @classmethod
    def of(cls, gpus: list[GPUAvailability]) -> Room:
        frees = tuple(sorted((g.free_memory for g in gpus), reverse=True))
        totals = {g.memory_total for g in gpus}
        total = totals.pop() if len(totals) == 1 else None
        return cls(frees, tuple(-f for f in frees), total or None)


@dataclass(frozen=True)
class PairMatrix:
    """Per pair of GPU indexes: connection rank (0 NVLink .. 3 system), NVLinks, peer access, PXB."""

    cls: list[list[int]]
    nvl: list[list[int]]
    peer: list[list[bool]]
    pxb: list[list[bool]]

    @cached_property
    def nvlink_masks(self) -> tuple[int, ...]:
        """Per GPU index, the bit mask of the GPUs it has NVLinks to."""
        return tuple(sum(1 << j for j, n in enumerate(row) if n > 0) for row in self.nvl)

    @cached_property
    def set_tables(self) -> dict[int, Any]:
        """Per set size, every set's linked score part, filled by ``setbound.set_table``."""
        return {}

    @classmethod
    def of(cls, host: HostState) -> PairMatrix:
        size = max([g.index for g in host.gpus] + [i for pair in host.links for i in pair] + [-1]) + 1
        # Hosts of one model have one link matrix: built (and its set tables) once.
        return _pair_matrix(size, frozenset(host.links.items()))

    @classmethod
    def build(cls, size: int, links: frozenset[tuple[tuple[int, int], LinkInfo]]) -> PairMatrix:
        # Pairs with no link row count as "across the system", without peer access.
        rank = [[3] * size for _ in range(size)]
        nvl = [[0] * size for _ in range(size)]
        peer = [[False] * size for _ in range(size)]
        pxb = [[False] * size for _ in range(size)]
        for (a, b), link in links:
            c = link_rank(link)
            rank[a][b] = rank[b][a] = c
            nvl[a][b] = nvl[b][a] = link.nvlink_count
            peer[a][b] = peer[b][a] = link.peer_access
            pxb[a][b] = pxb[b][a] = c == 1 and (link.pcie_level or "").upper() == "PXB"
        return cls(rank, nvl, peer, pxb)


@lru_cache(maxsize=1024)
def _pair_matrix(size: int, links: frozenset[tuple[tuple[int, int], LinkInfo]]) -> PairMatrix:
    return PairMatrix.build(size, links)


def link_rank(link: LinkInfo | None) -> int:
    """The connection rank of one pair: 0 NVLink, 1 one PCIe switch, 2 one NUMA node, 3 system."""
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


@dataclass(frozen=True)
class FleetState:
    hosts: tuple[HostState, ...]
    # GPU model name -> samples/s per GPU that gpufleet measured (weights.py).
    measured_speed: Mapping[str, float] = field(default_factory=dict)

    @cached_property
    def sizes(self) -> FleetSizes:
        return FleetSizes.of(self.hosts)

    def host(self, name: str) -> HostState | None:
        for h in self.hosts:
            if h.name == name:
                return h
        return None


@dataclass(frozen=True)
class FleetSizes:
    """Per count n, the largest memory size that n GPUs of one host all have (0 for unknown sizes)."""

    nth_largest: tuple[int, ...]

    @classmethod
    def of(cls, hosts: tuple[HostState, ...]) -> FleetSizes:
        best: list[int] = []
        for h in hosts:
            sizes = sorted(((g.memory_total or 0) for g in h.gpus), reverse=True)
            for n, size in enumerate(sizes):
                if n == len(best):
                    best.append(size)
                elif size > best[n]:
                    best[n] = size
        return cls(tuple(best))

    def fits(self, count: int, memory: int) -> bool:
        """Whether some host has ``count`` GPUs of at least ``memory`` bytes each."""
        return count <= len(self.nth_largest) and self.nth_largest[count - 1] >= memory


@dataclass(frozen=True)
class SelectionRequest:
    """What a training needs: ``count`` GPUs on one host with ``memory_bytes`` free each."""

    memory_bytes: int
    count: int = 1
    host: str | None = None
    # Exclusive trainings need free GPUs; shared ones may join a shared GPU.
    exclusive: bool = True
    policy: Policy = "pack"
    max_candidates: int = 5

    def __post_init__(self) -> None:
        if self.memory_bytes < 0:
            raise ValueError("memory must be >= 0")
        if self.count < 1:
            raise ValueError("count must be >= 1")
        if self.policy not in ("pack", "spread"):
            raise ValueError(f"policy must be 'pack' or 'spread', not {self.policy!r}")
        if self.max_candidates < 1:
            raise ValueError("max_candidates must be >= 1")


@dataclass(frozen=True)
class Candidate:
    """One GPU set on one host, with its score (higher is better) and reasons."""

    host: str
    gpu_indexes: tuple[int, ...]
    score: float
    connection: Connection
    reasons: tuple[str, ...] = ()
    free_memory: tuple[int, ...] = ()
    # Relative speed weights (sum 1) for mixed GPU models; see weights.py.
    weights: tuple[float, ...] = ()


@dataclass(frozen=True)
class Recommendation:
    """Ranked candidates; or ``refused`` (can never fit); or ``wait_reason`` (nothing fits now)."""

    request: SelectionRequest
    candidates: tuple[Candidate, ...] = ()
    refused: str | None = None
    wait_reason: str | None = None

    @property
    def top(self) -> Candidate | None:
        return self.candidates[0] if self.candidates else None
