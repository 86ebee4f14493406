"""The simulated fleet's hardware: GPU models, their order, PCIe and NVLink wiring.

``GPUFLEET_SIMULATE=2xH100-80GB+1xMI300X`` is turned into a list of
:class:`SimGPU` by :func:`build_fleet`. Everything here is fixed by the spec,
the topology name and the host name (no state), so every process that reads the
same settings sees the same fleet, with the same UUIDs and PCI bus ids.

Ordering: NVIDIA GPUs come first, then AMD, then Intel, each in the spec's
order. That is the order real detection uses (NVML, then ROCm, then XPU), and
it makes a GPU's fleet index equal to its NVML index for every NVIDIA GPU.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from functools import lru_cache

from gpufleet.config import parse_simulate_spec

GIB = 1024**3

# Topology names accepted by ``GPUFLEET_SIMULATE_TOPOLOGY``.
TOPOLOGIES = ("nvlink-all", "nvlink-pairs", "pcie")

# A NUMA node holds four GPUs (two PCIe switches of two GPUs in the ``pcie``
# layout), as on common 8-GPU servers.
GPUS_PER_NUMA_NODE = 4
GPUS_PER_PCIE_SWITCH = 2
# An NVSwitch fabric (DGX/HGX style) has four switches; a GPU's links are
# spread over them.
NVSWITCHES = 4


@dataclass(frozen=True)
class ModelSpec:
    """What one GPU model looks like to NVML (or to ROCm/XPU for other vendors)."""

    vendor: str  # nvidia | amd | intel
    name: str  # may hold {mem}, replaced by the memory in GB
    memory_gb: int
    compute_capability: tuple[int, int] | None = None
    power_limit_w: int = 300
    sm_clock_max_mhz: int = 1800
    sm_clock_idle_mhz: int = 345
    mem_clock_mhz: int = 5000
    nvlinks: int = 0  # NVLink links per GPU; 0 = the model has none
    ecc: bool = True
    pci_device_id: int = 0x000010DE

    @property
    def backend(self) -> str:
        return {"nvidia": "cuda", "amd": "hip", "intel": "xpu"}[self.vendor]


# Data sheet values (memory, compute capability, board power, boost and memory
# clocks, NVLink links per GPU). The PCI device ids are the vendors' own.
KNOWN_MODELS: dict[str, ModelSpec] = {
    "H200": ModelSpec("nvidia", "NVIDIA H200", 141, (9, 0), 700, 1980, 345, 3201, 18, True, 0x233510DE),
    "H100": ModelSpec("nvidia", "NVIDIA H100 {mem}GB HBM3", 80, (9, 0), 700, 1980, 345, 2619, 18, True, 0x233010DE),
    "A100": ModelSpec("nvidia", "NVIDIA A100-SXM4-{mem}GB", 80, (8, 0), 400, 1410, 210, 1593, 12, True, 0x20B210DE),
    "V100": ModelSpec("nvidia", "Tesla V100-SXM2-{mem}GB", 32, (7, 0), 300, 1530, 135, 877, 6, True, 0x1DB110DE),
    "L40S": ModelSpec("nvidia", "NVIDIA L40S", 48, (8, 9), 350, 2520, 210, 9001, 0, True, 0x26B910DE),
    "L4": ModelSpec("nvidia", "NVIDIA L4", 24, (8, 9), 72, 2040, 210, 6251, 0, True, 0x27B810DE),
    "T4": ModelSpec("nvidia", "Tesla T4", 16, (7, 5), 70, 1590, 300, 5001, 0, True, 0x1EB810DE),
    "A6000": ModelSpec("nvidia", "NVIDIA RTX A6000", 48, (8, 6), 300, 2100, 210, 8001, 4, True, 0x223010DE),
    "RTX4090": ModelSpec("nvidia", "NVIDIA GeForce RTX 4090", 24, (8, 9), 450, 2520, 210, 10501, 0, False, 0x268410DE),
    "RTX3090": ModelSpec("nvidia", "NVIDIA GeForce RTX 3090", 24, (8, 6), 350, 2100, 210, 9751, 4, False, 0x220410DE),
    "MI300X": ModelSpec("amd", "AMD Instinct MI300X", 192, None, 750, 2100, 132, 1300, 0, True, 0x74A11002),
    "MI250X": ModelSpec("amd", "AMD Instinct MI250X", 128, None, 560, 1700, 500, 1600, 0, True, 0x740C1002),
    "RX7900XTX": ModelSpec("amd", "AMD Radeon RX 7900 XTX", 24, None, 355, 2500, 100, 2500, 0, False, 0x744C1002),
    "A770": ModelSpec("intel", "Intel(R) Arc(TM) A770 Graphics", 16, None, 225, 2400, 300, 2000, 0, False, 0x56A08086),
    "A750": ModelSpec("intel", "Intel(R) Arc(TM) A750 Graphics", 8, None, 225, 2400, 300, 2000, 0, False, 0x56A18086),
    "MAX1550": ModelSpec("intel", "Intel(R) Data Center GPU Max 1550", 128, None, 600, 1600, 300, 3200, 0, True,
                         0x0BD58086),
}

_VENDOR_ORDER = {"nvidia": 0, "amd": 1, "intel": 2}


def model_spec(model: str, memory_gb: int | None) -> ModelSpec:
    """The spec of ``model`` (case-insensitive); unknown models get sane defaults.

    An unknown model is taken as an NVIDIA GPU (the simulator's main use)
    unless its name says otherwise (``MI…``/``RX…`` are AMD, ``ARC…`` Intel).
    """
    key = model.upper().replace("-", "").replace("_", "")
    spec = KNOWN_MODELS.get(key)
    if spec is None:
        vendor = "nvidia"
        if key.startswith(("MI", "RX")):
            vendor = "amd"
        elif key.startswith("ARC"):
            vendor = "intel"
        prefix = {"nvidia": "NVIDIA", "amd": "AMD", "intel": "Intel"}[vendor]
        spec = ModelSpec(
            vendor=vendor,
            name=f"{prefix} {model}",
            memory_gb=16,
            compute_capability=(8, 0) if vendor == "nvidia" else None,
            pci_device_id={"nvidia": 0x000010DE, "amd": 0x00001002, "intel": 0x00008086}[vendor],
        )
    if memory_gb is not None and memory_gb != spec.memory_gb:
        spec = ModelSpec(**{**spec.__dict__, "memory_gb": memory_gb})
    return spec


@dataclass(frozen=True)
class SimGPU:
    """One simulated GPU: its identity and fixed properties."""

    index: int  # fleet index (NVML index for NVIDIA GPUs)
    device_id: int  # index within its backend (cuda:N, hip:N, xpu:N)
    model: str  # the spec's model key, e.g. "H100"
    spec: ModelSpec
    uuid: str
    pci_bus_id: str  # "00000000:18:00.0", as NVML's busId

    @property
    def vendor(self) -> str:
        return self.spec.vendor

    @property
    def backend(self) -> str:
        return self.spec.backend

    @property
    def name(self) -> str:
        return self.spec.name.format(mem=self.spec.memory_gb)

    @property
    def memory_total(self) -> int:
        return self.spec.memory_gb * GIB


def _pci_bus_id(position: int) -> str:
    # Spread GPUs over the bus numbers a large server uses; wrap into a new
    # PCI domain every 12 GPUs so ids stay unique for big simulated hosts.
    domain, slot = divmod(position, 12)
    return f"{domain:08X}:{0x18 + slot * 0x12:02X}:00.0"


def nvswitch_bus_id(switch: int) -> str:
    """PCI bus id of simulated NVSwitch ``switch`` (never a GPU's id)."""
    return f"00000000:{0xE0 + switch:02X}:00.0"


@lru_cache(maxsize=64)
def build_fleet(spec: str, host_name: str = "localhost") -> tuple[SimGPU, ...]:
    """The simulated GPUs of ``spec``, NVIDIA first (see the module docstring)."""
    entries: list[tuple[str, ModelSpec]] = []
    for count, model, mem in parse_simulate_spec(spec):
        ms = model_spec(model, mem)
        entries.extend((model.upper(), ms) for _ in range(count))
    # sorted() is stable: within a vendor the spec's order is kept.
    entries.sort(key=lambda e: _VENDOR_ORDER[e[1].vendor])
    per_backend: dict[str, int] = {}
    gpus: list[SimGPU] = []
    for index, (model, ms) in enumerate(entries):
        device_id = per_backend.get(ms.backend, 0)
        per_backend[ms.backend] = device_id + 1
        # The host name is in the UUID so that simulated hosts of one fleet
        # never share GPU identities.
        gid = uuid.uuid5(uuid.NAMESPACE_URL, f"gpufleet-sim://{host_name}/{index}/{model}")
        prefix = "GPU-" if ms.vendor == "nvidia" else ""
        gpus.append(SimGPU(index, device_id, model, ms, f"{prefix}{gid}", _pci_bus_id(index)))
    return tuple(gpus)


# ---------------------------------------------------------------------------
# Wiring


def _nvlink_domain(gpus: tuple[SimGPU, ...], a: SimGPU) -> list[SimGPU]:
    # NVLink joins GPUs of one model only, and only models that have links.
    if a.vendor != "nvidia" or a.spec.nvlinks == 0:
        return []
    return [g for g in gpus if g.model == a.model and g.spec == a.spec]


@lru_cache(maxsize=64)
def nvlink_wiring(gpus: tuple[SimGPU, ...], topology: str) -> dict[int, list[str | None]]:
    """For each NVIDIA GPU, the remote PCI bus id of each of its NVLink links.

    ``None`` marks a link that exists on the board but is not connected.
    ``nvlink-all`` joins a model's GPUs directly when there are two, through an
    NVSwitch fabric when there are more (as HGX boards do); ``nvlink-pairs``
    joins 0-1, 2-3, … directly; ``pcie`` connects nothing.
    """
    wiring: dict[int, list[str | None]] = {}
    for g in gpus:
        if g.vendor != "nvidia":
            continue
        links: list[str | None] = [None] * g.spec.nvlinks
        domain = _nvlink_domain(gpus, g)
        if topology == "nvlink-all" and len(domain) == 2:
            peer = domain[0] if domain[1].index == g.index else domain[1]
            links = [peer.pci_bus_id] * g.spec.nvlinks
        elif topology == "nvlink-all" and len(domain) > 2:
            links = [nvswitch_bus_id(k % NVSWITCHES) for k in range(g.spec.nvlinks)]
        elif topology == "nvlink-pairs" and domain:
            partner_index = g.index ^ 1
            partner = next((d for d in domain if d.index == partner_index), None)
            if partner is not None:
                links = [partner.pci_bus_id] * g.spec.nvlinks
        wiring[g.index] = links
    return wiring


def nvlink_count(gpus: tuple[SimGPU, ...], topology: str, a: int, b: int) -> int:
    """NVLink links between fleet GPUs ``a`` and ``b`` (0 when none)."""
    if a == b:
        return 0
    wiring = nvlink_wiring(gpus, topology)
    la, lb = wiring.get(a, []), wiring.get(b, [])
    if not la or not lb:
        return 0
    direct = sum(1 for r in la if r == gpus[b].pci_bus_id)
    if direct:
        return direct
    switches = {nvswitch_bus_id(k) for k in range(NVSWITCHES)}
    if switches & set(la) & set(lb):
        return min(sum(1 for r in la if r), sum(1 for r in lb if r))
    return 0


def pcie_level(topology: str, a: int, b: int) -> str:
    """The ``nvidia-smi topo -m`` PCIe level between fleet GPUs ``a`` and ``b``.

    ``pcie``: two GPUs per PCIe switch (``PIX``), two switches per NUMA node
    (``NODE``), ``SYS`` across nodes. The NVLink layouts put each GPU on its own
    root port, so GPUs meet at ``NODE`` or ``SYS``.
    """
    if a == b:
        return "X"
    if topology == "pcie" and a // GPUS_PER_PCIE_SWITCH == b // GPUS_PER_PCIE_SWITCH:
        return "PIX"
    if a // GPUS_PER_NUMA_NODE == b // GPUS_PER_NUMA_NODE:
        return "NODE"
    return "SYS"


def peer_access(gpus: tuple[SimGPU, ...], topology: str, a: int, b: int) -> bool:
    """Peer-to-peer works over NVLink or under one PCIe switch, between NVIDIA GPUs."""
    if a == b or gpus[a].vendor != "nvidia" or gpus[b].vendor != "nvidia":
        return False
    return nvlink_count(gpus, topology, a, b) > 0 or pcie_level(topology, a, b) in ("PIX", "PXB")
