"""Hardware truth: GPU detection per vendor, topology, device groups, the simulated fleet.

Nothing here imports torch at module level; torch is imported only where a
``torch.device`` is built. ``move_to_device`` and ``backend_ops`` (in
``devices/ops.py``, which needs torch) are loaded on first use, so importing
this package from the web app stays light.
"""

from typing import Any

from gpufleet.devices.detect import detect_gpus
from gpufleet.devices.groups import (
    MODES,
    DeviceGroup,
    create_device_group,
    device_group_from_settings,
    log_gpu_topology,
)
from gpufleet.devices.ids import DeviceId, parse_device_ids, resolve_device_ids
from gpufleet.devices.nvml import get_nvml
from gpufleet.devices.topology import Link, Topology, detect_topology, format_matrix
from gpufleet.devices.types import BACKENDS, GPUDevice, GPUInfo, torch_device_string

# Names served from devices/ops.py on first access (it imports torch).
_OPS_NAMES = ("move_to_device", "backend_ops", "BackendOps")


def __getattr__(name: str) -> Any:
    if name in _OPS_NAMES:
        try:
            from gpufleet.devices import ops
        except ImportError as exc:
            raise AttributeError(f"gpufleet.devices.{name} is unavailable: {exc}") from exc
        return getattr(ops, name)
    raise AttributeError(f"module 'gpufleet.devices' has no attribute {name!r}")


__all__ = [
    "BACKENDS",
    "MODES",
    "DeviceGroup",
    "DeviceId",
    "GPUDevice",
    "GPUInfo",
    "Link",
    "Topology",
    "create_device_group",
    "detect_gpus",
    "detect_topology",
    "device_group_from_settings",
    "format_matrix",
    "get_nvml",
    "log_gpu_topology",
    "parse_device_ids",
    "resolve_device_ids",
    "torch_device_string",
    *_OPS_NAMES,
]
