"""Hardware truth: GPU detection per vendor, topology, device groups, the device backends, the device value.

Everything outside this package reaches the GPUs through a
:class:`~gpufleet.devices.backend.DeviceBackend` (real drivers or the
simulated fleet), chosen by :func:`~gpufleet.devices.backend.device_backend`,
and names a process's GPUs through :class:`~gpufleet.devices.device.DeviceSet`
(the visibility variables and their string forms).
This module only gathers the public names, each loaded with its module on
first use (as ``gpufleet.wire`` does), so that the client and the CLI can read
``gpufleet.devices.device`` without the settings the backends import; the
modules of the package import each other directly, never through it. Nothing
here imports torch: ``move_to_device`` and ``backend_ops`` live in
:mod:`gpufleet.devices.ops`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpufleet.devices.backend import DeviceBackend, detect_gpus, detect_topology, device_backend
    from gpufleet.devices.device import Device, DeviceSet
    from gpufleet.devices.groups import (
        MODES,
        DeviceGroup,
        create_device_group,
        device_group_from_settings,
        log_gpu_topology,
    )
    from gpufleet.devices.ids import DeviceId, parse_device_ids, resolve_device_ids
    from gpufleet.devices.topology import Link, Topology, format_matrix
    from gpufleet.devices.types import BACKENDS, GPUDevice, GPUInfo, ProcessNote, torch_device_string

HOMES: dict[str, tuple[str, ...]] = {
    "gpufleet.devices.backend": ("DeviceBackend", "detect_gpus", "detect_topology", "device_backend"),
    "gpufleet.devices.device": ("Device", "DeviceSet"),
    "gpufleet.devices.groups": ("MODES", "DeviceGroup", "create_device_group", "device_group_from_settings",
                                "log_gpu_topology"),
    "gpufleet.devices.ids": ("DeviceId", "parse_device_ids", "resolve_device_ids"),
    "gpufleet.devices.topology": ("Link", "Topology", "format_matrix"),
    "gpufleet.devices.types": ("BACKENDS", "GPUDevice", "GPUInfo", "ProcessNote", "torch_device_string"),
}
_MODULE_OF = {name: module for module, names in HOMES.items() for name in names}

__all__ = [
    "BACKENDS",
    "MODES",
    "Device",
    "DeviceBackend",
    "DeviceGroup",
    "DeviceId",
    "DeviceSet",
    "GPUDevice",
    "GPUInfo",
    "Link",
    "ProcessNote",
    "Topology",
    "create_device_group",
    "detect_gpus",
    "detect_topology",
    "device_backend",
    "device_group_from_settings",
    "format_matrix",
    "log_gpu_topology",
    "parse_device_ids",
    "resolve_device_ids",
    "torch_device_string",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'gpufleet.devices' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_MODULE_OF))
