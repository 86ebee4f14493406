"""How this machine's GPUs are connected: NVLink links, PCIe distance, peer access.

Built from NVML, so it is the same code on a real and on a simulated host:

- NVLink: for each GPU, links ``0..NVML_NVLINK_MAX_LINKS-1`` are asked for
  their state; an active link's remote PCI bus id is either another GPU (a
  direct bridge) or an NVSwitch. Two GPUs that reach a common NVSwitch are
  connected by as many links as the smaller of their switch link counts, which
  is what ``nvidia-smi topo -m`` prints (``NV18`` on an HGX H100).
- PCIe: ``nvmlDeviceGetTopologyCommonAncestor`` gives the level, named as
  ``nvidia-smi topo -m`` names it (``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS``).
- Peer access: ``nvmlDeviceGetP2PStatus`` for reads.

Pairs NVML cannot describe (AMD, Intel, a lost GPU) get no NVLink, an unknown
(``None``) PCIe level and no peer access, unless the device backend knows the
PCIe layout (a simulated host does).
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from gpufleet.devices.types import GPUInfo

log = logging.getLogger(__name__)

PCIE_LEVELS = ("PIX", "PXB", "PHB", "NODE", "SYS")

# pynvml defines NVML_P2P_CAPS_INDEX_READ as the tuple (0,), which ctypes
# refuses; the C enum value is 0.
P2P_CAPS_INDEX_READ = 0

# Each line fits an 80-column terminal.
LEGEND = """\
Legend:
  X    = the GPU itself
  SYS  = PCIe and the link between NUMA nodes (QPI/UPI, Infinity Fabric)
  NODE = PCIe and between PCIe host bridges within one NUMA node
  PHB  = PCIe and a PCIe host bridge (usually the CPU)
  PXB  = several PCIe bridges, without a host bridge
  PIX  = at most one PCIe bridge (one PCIe switch)
  NV#  = a bonded set of # NVLinks
  ?    = unknown (not an NVIDIA pair, or the GPU does not answer)
Peer access: GPUs that read each other's memory directly (NVLink, one switch)."""


@dataclass(frozen=True)
class Link:
    nvlink_count: int = 0
    pcie_level: str | None = None  # one of PCIE_LEVELS, None when unknown
    peer_access: bool = False

    @property
    def label(self) -> str:
        """The ``nvidia-smi topo -m`` cell: ``NV18``, ``PIX``, ``SYS``, ``?``."""
        if self.nvlink_count:
            return f"NV{self.nvlink_count}"
        return self.pcie_level or "?"


@dataclass
class Topology:
    gpus: tuple[GPUInfo, ...] = ()
    # Both (a, b) and (b, a) are present for every pair of fleet indexes.
    links: dict[tuple[int, int], Link] = field(default_factory=dict)

    @property
    def indexes(self) -> list[int]:
        return [g.index for g in self.gpus]

    def link(self, a: int, b: int) -> Link:
        return self.links.get((a, b), Link())

    def nvlink_missing(self, indexes: list[int]) -> list[tuple[int, int]]:
        """The pairs among ``indexes`` that have no NVLink."""
        return [
            (a, b)
            for i, a in enumerate(indexes)
            for b in indexes[i + 1 :]
            if self.link(a, b).nvlink_count == 0
        ]

    def nvlink_connected(self, indexes: list[int]) -> bool:
        """True if every pair among ``indexes`` (two or more) is NVLink-connected."""
        return len(indexes) > 1 and not self.nvlink_missing(indexes)

    def to_dict(self) -> dict[str, Any]:
        idx = self.indexes
        return {
            "gpus": [g.to_dict() for g in self.gpus],
            "matrix": [["X" if a == b else self.link(a, b).label for b in idx] for a in idx],
            "links": [
                {"gpu_a": a, "gpu_b": b, "nvlink_count": l.nvlink_count,
                 "pcie_level": l.pcie_level, "peer_access": l.peer_access}
                for (a, b), l in sorted(self.links.items())
                if a < b and a in idx and b in idx
            ],
        }


def _norm_bus_id(bus_id: str) -> str:
    # NVML mixes 4- and 8-digit PCI domains ("0000:18:00.0" / "00000000:18:00.0").
    domain, _, rest = bus_id.strip().upper().partition(":")
    try:
        return f"{int(domain, 16):08X}:{rest}"
    except ValueError:
        return bus_id.strip().upper()


def _levels(nvml: Any) -> dict[int, str]:
    return {
        nvml.NVML_TOPOLOGY_INTERNAL: "PIX",
        nvml.NVML_TOPOLOGY_SINGLE: "PIX",
        nvml.NVML_TOPOLOGY_MULTIPLE: "PXB",
        nvml.NVML_TOPOLOGY_HOSTBRIDGE: "PHB",
        nvml.NVML_TOPOLOGY_NODE: "NODE",
        nvml.NVML_TOPOLOGY_SYSTEM: "SYS",
    }


def nvml_links(nvml: Any, gpus: list[GPUInfo]) -> dict[tuple[int, int], Link]:
    """Links between the healthy NVIDIA GPUs of ``gpus``, read from ``nvml``."""
    nv = [g for g in gpus if g.vendor == "nvidia" and g.healthy]
    if len(nv) < 2:
        return {}
    try:
        nvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - no NVML: nothing is known
        log.debug("NVML unavailable for topology: %s", exc)
        return {}
    try:
        handles: dict[int, Any] = {}
        for g in nv:
            try:
                handles[g.index] = nvml.nvmlDeviceGetHandleByIndex(g.device_id)
            except nvml.NVMLError as exc:
                log.warning("topology: cannot open GPU %d: %s", g.index, exc)
        by_bus = {_norm_bus_id(g.pci_bus_id): g.index for g in nv if g.pci_bus_id}
        direct: dict[int, Counter[int]] = {i: Counter() for i in handles}
        switched: dict[int, Counter[str]] = {i: Counter() for i in handles}
        for i, h in handles.items():
            for link in range(nvml.NVML_NVLINK_MAX_LINKS):
                try:
                    if nvml.nvmlDeviceGetNvLinkState(h, link) != nvml.NVML_FEATURE_ENABLED:
                        continue
                    remote = _norm_bus_id(nvml.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId)
                except nvml.NVMLError:
                    # NotSupported (no NVLink) or InvalidArgument (past the last link).
                    break
                if remote in by_bus:
                    direct[i][by_bus[remote]] += 1
                else:
                    switched[i][remote] += 1
        levels = _levels(nvml)
        links: dict[tuple[int, int], Link] = {}
        ids = sorted(handles)
        for n, a in enumerate(ids):
            for b in ids[n + 1 :]:
                count = max(direct[a][b], direct[b][a])
                if not count and set(switched[a]) & set(switched[b]):
                    count = min(sum(switched[a].values()), sum(switched[b].values()))
                try:
                    level = levels.get(nvml.nvmlDeviceGetTopologyCommonAncestor(handles[a], handles[b]))
                except nvml.NVMLError:
                    level = None
                try:
                    status = nvml.nvmlDeviceGetP2PStatus(handles[a], handles[b], P2P_CAPS_INDEX_READ)
                    p2p = status == nvml.NVML_P2P_STATUS_OK
                except nvml.NVMLError:
                    p2p = False
                links[(a, b)] = links[(b, a)] = Link(count, level, p2p)
        return links
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass


def build_topology(gpus: list[GPUInfo], links: dict[tuple[int, int], Link],
                   pcie_level: Callable[[int, int], str | None] | None = None) -> Topology:
    """``gpus`` with ``links`` (from :func:`nvml_links`); pairs NVML did not describe get no NVLink.

    ``pcie_level(a, b)`` gives those pairs' PCIe level where the backend knows
    it without NVML (a simulated host knows its layout); otherwise it is unknown.
    """
    links = dict(links)
    for i, a in enumerate(gpus):
        for b in gpus[i + 1 :]:
            if (a.index, b.index) in links:
                continue
            level = None
            if pcie_level is not None and a.healthy and b.healthy:
                level = pcie_level(a.index, b.index)
            links[(a.index, b.index)] = links[(b.index, a.index)] = Link(0, level, False)
    return Topology(tuple(gpus), links)


def format_matrix(topology: Topology, legend: bool = False) -> str:
    """The link matrix as ``nvidia-smi topo -m`` prints it."""
    idx = topology.indexes
    if not idx:
        return "no GPUs"
    heads = [f"GPU{i}" for i in idx]
    cells = [["X" if a == b else topology.link(a, b).label for b in idx] for a in idx]
    width = max(len(s) for s in heads + [c for row in cells for c in row]) + 2
    lines = [" " * width + "".join(h.ljust(width) for h in heads).rstrip()]
    for head, row in zip(heads, cells):
        lines.append((head.ljust(width) + "".join(c.ljust(width) for c in row)).rstrip())
    if legend:
        lines += ["", LEGEND]
    return "\n".join(lines)


def peer_pairs(topology: Topology) -> list[tuple[int, int]]:
    """Pairs of the topology's GPUs with peer access, each once (a < b)."""
    idx = set(topology.indexes)
    return sorted((a, b) for (a, b), l in topology.links.items() if a < b and {a, b} <= idx and l.peer_access)
