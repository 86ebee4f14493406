"""Device groups: the GPUs one piece of work runs on, and how they are joined.

Modes:

- ``cpu``: no GPU.
- ``single``: exactly one GPU.
- ``nvlink``: two or more GPUs of which *every pair* is NVLink-connected, as
  the links read from NVML say (not assumed from the GPU count).
- ``pcie``: two or more GPUs that are not all NVLink-connected. DESIGN lists
  cpu | single | nvlink; a multi-GPU set without NVLink is still a valid group
  (DDP over PCIe works, only slower), and calling it ``single`` or ``nvlink``
  would be false, so it gets its own name. ``auto`` never picks ``nvlink`` for
  it; asking for ``nvlink`` explicitly is refused with the missing pairs.

A group never mixes backends: NCCL, RCCL and oneCCL cannot join one process
group, so ``cuda:0`` with ``xpu:0`` is refused.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpufleet.config import Settings
from gpufleet.devices.backend import device_backend
from gpufleet.devices.ids import DeviceId, resolve_device_ids
from gpufleet.devices.topology import Topology, format_matrix, peer_pairs
from gpufleet.devices.types import GPUInfo

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

MODES = ("cpu", "single", "nvlink", "pcie")
# The seed's names for the same modes.
_ALIASES = {"single_gpu": "single", "nvlink_pod": "nvlink"}


@dataclass(frozen=True)
class DeviceGroup:
    mode: str
    gpus: tuple[GPUInfo, ...] = ()
    allow_peer_access: bool = False
    topology: Topology | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown device group mode {self.mode!r}; one of {', '.join(MODES)}")
        n = len(self.gpus)
        if self.mode == "cpu" and n:
            raise ValueError("a cpu group holds no GPUs")
        if self.mode == "single" and n != 1:
            raise ValueError(f"a single group holds exactly one GPU, got {n}")
        if self.mode in ("nvlink", "pcie") and n < 2:
            raise ValueError(f"a {self.mode} group needs at least two GPUs, got {n}")
        if len({g.backend for g in self.gpus}) > 1:
            raise ValueError("a device group cannot mix backends: " + ", ".join(g.label for g in self.gpus))

    @property
    def ids(self) -> list[int]:
        """Fleet indexes of the group's GPUs (empty for cpu)."""
        return [g.index for g in self.gpus]

    def device_strings(self) -> list[str]:
        """``["cuda:0", "cuda:1"]`` or ``["cpu"]``: what a launch spec carries."""
        return [g.torch_device for g in self.gpus] or ["cpu"]

    def primary(self) -> torch.device:
        import torch

        return torch.device(self.device_strings()[0])

    def all(self) -> list[torch.device]:
        import torch

        return [torch.device(s) for s in self.device_strings()]

    def count(self) -> int:
        """Devices in the group (a cpu group has one device: the CPU)."""
        return len(self.device_strings())

    def is_multi_gpu(self) -> bool:
        return len(self.gpus) > 1

    @property
    def peer_access(self) -> bool:
        """True if peer access is allowed and works between every pair."""
        if not self.allow_peer_access or not self.is_multi_gpu() or self.topology is None:
            return False
        ids = self.ids
        return all(self.topology.link(a, b).peer_access for i, a in enumerate(ids) for b in ids[i + 1 :])

    def __repr__(self) -> str:
        return f"DeviceGroup(mode={self.mode}, devices={self.device_strings()})"


def _resolve(devices: Sequence[int] | Sequence[DeviceId] | str, gpus: list[GPUInfo]) -> list[GPUInfo]:
    if isinstance(devices, str):
        return resolve_device_ids(devices, gpus)
    ids = [d if isinstance(d, DeviceId) else DeviceId(None, int(d)) for d in devices]
    return resolve_device_ids(ids, gpus)


def create_device_group(
    mode: str = "auto",
    devices: Sequence[int] | Sequence[DeviceId] | str | None = None,
    allow_peer_access: bool = True,
    gpus: Sequence[GPUInfo] | None = None,
    topology: Topology | None = None,
) -> DeviceGroup:
    """Build a group from the config's ``gpu:`` block and what detection found.

    ``devices`` are fleet indexes (or a ``--gpu-ids`` string); ``None`` takes
    every healthy GPU of the first detected backend (one GPU for ``single``).
    ``auto`` picks cpu, single, nvlink (only if every pair has NVLink) or pcie.
    Raises ``ValueError`` with the reason and what to change.
    """
    mode = _ALIASES.get(str(mode).lower(), str(mode).lower())
    if mode not in ("auto", *MODES):
        raise ValueError(f"unknown gpu mode {mode!r}; one of auto, {', '.join(MODES)}")
    if mode == "cpu":
        return DeviceGroup("cpu")
    found = list(gpus or [])
    if devices is None:
        healthy = [g for g in found if g.healthy]
        chosen = [g for g in healthy if healthy and g.backend == healthy[0].backend]
        if mode == "single":
            chosen = chosen[:1]
    else:
        chosen = _resolve(devices, found)
        for g in chosen:
            if not g.healthy:
                raise ValueError(f"GPU {g.index} ({g.label}) is unhealthy: {g.error or 'the driver reports an error'}")
    if not chosen:
        if mode == "auto":
            return DeviceGroup("cpu")
        raise ValueError(f"gpu mode {mode} needs GPUs but none are usable here; use mode cpu or auto")
    backends = sorted({g.backend for g in chosen})
    if len(backends) > 1:
        raise ValueError(
            "GPUs of different backends cannot train together ("
            + ", ".join(g.label for g in chosen)
            + "); choose GPUs of one backend"
        )
    if mode == "auto":
        if len(chosen) == 1:
            mode = "single"
        elif topology is not None and topology.nvlink_connected([g.index for g in chosen]):
            mode = "nvlink"
        else:
            mode = "pcie"
    elif mode == "single" and len(chosen) != 1:
        raise ValueError(f"gpu mode single takes one GPU, got {len(chosen)}; use mode auto for several")
    elif mode == "nvlink":
        _check_nvlink(chosen, topology)
    elif mode == "pcie" and len(chosen) < 2:
        raise ValueError("gpu mode pcie needs at least two GPUs; use mode single for one")
    return DeviceGroup(mode, tuple(chosen), allow_peer_access, topology)


def _check_nvlink(chosen: list[GPUInfo], topology: Topology | None) -> None:
    if len(chosen) < 2:
        raise ValueError("gpu mode nvlink needs at least two GPUs; use mode single for one")
    if topology is None:
        raise ValueError("gpu mode nvlink needs the GPU topology to confirm the links; none was given")
    missing = topology.nvlink_missing([g.index for g in chosen])
    if missing:
        pairs = ", ".join(f"{a}-{b} ({topology.link(a, b).label})" for a, b in missing)
        raise ValueError(
            f"gpu mode nvlink: these GPU pairs have no NVLink: {pairs}; "
            "choose NVLink-connected GPUs (see `gpufleet topology`) or use mode auto"
        )


def device_group_from_settings(
    settings: Settings, devices: Sequence[int] | Sequence[DeviceId] | str | None = None
) -> DeviceGroup:
    """Detect this machine and build the group its ``gpu:`` settings ask for."""
    backend = device_backend(settings)
    gpus = backend.detect_gpus()
    topology = backend.detect_topology(gpus)
    cfg = settings.gpu
    return create_device_group(
        cfg.mode, devices if devices is not None else cfg.devices, cfg.allow_peer_access, gpus, topology
    )


def _gib(n: int | None) -> str:
    return f"{n / 2**30:.1f} GiB" if n is not None else "? GiB"


def log_gpu_topology(
    target: DeviceGroup | Topology | Sequence[GPUInfo], logger: logging.Logger | None = None
) -> dict[str, Any]:
    """Log how gpufleet sees this machine's GPUs; return the same facts as a dict."""
    lg = logger or log
    group = target if isinstance(target, DeviceGroup) else None
    if isinstance(target, DeviceGroup):
        gpus, topology = list(target.gpus), target.topology
    elif isinstance(target, Topology):
        gpus, topology = list(target.gpus), target
    else:
        gpus, topology = list(target), None
    info: dict[str, Any] = {"devices": [g.index for g in gpus], "gpus": {}}
    if group is not None:
        info.update(mode=group.mode, device_count=group.count(), peer_access=group.peer_access)
        lg.info("Device group: %s mode, devices %s", group.mode, group.device_strings())
    if not gpus:
        lg.info("No GPUs: trainings run on the CPU")
        return info
    for g in gpus:
        cc = f", compute {g.compute_capability}" if g.compute_capability else ""
        sim = " (simulated)" if g.simulated else ""
        if g.healthy:
            lg.info("GPU %d (%s): %s, %s%s%s", g.index, g.label, g.name, _gib(g.memory_total), cc, sim)
        else:
            lg.warning("GPU %d (%s): unhealthy: %s", g.index, g.label, g.error)
        info["gpus"][g.index] = {
            "name": g.name, "memory_total": g.memory_total, "compute_capability": g.compute_capability,
            "healthy": g.healthy,
        }
    if topology is not None and len(gpus) > 1:
        sub = Topology(tuple(gpus), topology.links)
        for line in format_matrix(sub).splitlines():
            lg.info("  %s", line)
        pairs = peer_pairs(sub)
        lg.info("Peer access: %s", ", ".join(f"{a}-{b}" for a, b in pairs) or "none")
        info["matrix"] = sub.to_dict()["matrix"]
        info["peer_pairs"] = pairs
    return info
