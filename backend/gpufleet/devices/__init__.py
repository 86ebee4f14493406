"""Hardware truth: GPU detection per vendor, topology, device groups, the device backends.

Everything outside this package reaches the GPUs through a
:class:`~gpufleet.devices.backend.DeviceBackend` (real drivers or the
simulated fleet), chosen by :func:`~gpufleet.devices.backend.device_backend`.
This module only gathers the public names; the modules of the package import
each other directly, never through it. Nothing here imports torch:
``move_to_device`` and ``backend_ops`` live in :mod:`gpufleet.devices.ops`.
"""

from gpufleet.devices.backend import (
    DeviceBackend,
    detect_gpus,
    detect_topology,
    device_backend,
)
from gpufleet.devices.groups import (
    MODES,
    DeviceGroup,
    create_device_group,
    device_group_from_settings,
    log_gpu_topology,
)
from gpufleet.devices.ids import DeviceId, parse_device_ids, resolve_device_ids
from gpufleet.devices.topology import Link, Topology, format_matrix
from gpufleet.devices.types import (
    BACKENDS,
    GPUDevice,
    GPUInfo,
    ProcessNote,
    torch_device_string,
)

__all__ = [
    "BACKENDS",
    "MODES",
    "DeviceBackend",
    "DeviceGroup",
    "DeviceId",
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
