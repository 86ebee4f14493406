"""Hardware truth: GPU detection per vendor, topology, device groups, the simulated fleet.

Nothing here imports torch at module level; torch is imported only where a
``torch.device`` is built or an AMD/Intel GPU is probed.
"""

from gpufleet.devices.nvml import get_nvml
from gpufleet.devices.types import BACKENDS, GPUDevice, GPUInfo, torch_device_string

__all__ = [
    "BACKENDS",
    "GPUDevice",
    "GPUInfo",
    "get_nvml",
    "torch_device_string",
]
