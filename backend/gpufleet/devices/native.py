"""The device backend of real hardware: NVML through ``pynvml``, ``amdsmi`` for ROCm, ``xpu-smi`` for Intel."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any

from gpufleet.devices.detect import detect_amd, detect_intel, detect_nvidia
from gpufleet.devices.topology import Topology, build_topology, nvml_links
from gpufleet.devices.types import GPUInfo, ProcessNote
from gpufleet.devices.xpusmi import XpuSmi


class NativeBackend:
    """This machine's GPUs as their drivers report them."""

    simulated = False
    description = None
    _contexts: dict[int, int] | None = None  # measured once per process (context_probe)

    @property
    def nvml(self) -> Any:
        # The module itself: its nvmlInit/nvmlShutdown count is process-wide.
        import pynvml

        return pynvml

    @cached_property
    def amdsmi(self) -> Any | None:
        try:
            import amdsmi
        except Exception:  # noqa: BLE001 - not installed, or installed without ROCm's libamd_smi.so
            return None
        return amdsmi

    @cached_property
    def xpusmi(self) -> XpuSmi | None:
        return XpuSmi() if XpuSmi.available() else None

    def detect_gpus(self) -> list[GPUInfo]:
        gpus = detect_nvidia(self.nvml)
        return gpus + self.detect_other_vendors(len(gpus))

    def detect_other_vendors(self, start_index: int) -> list[GPUInfo]:
        amd = detect_amd(start_index, self.amdsmi)
        return amd + detect_intel(start_index + len(amd), self.xpusmi)

    def detect_topology(self, gpus: list[GPUInfo]) -> Topology:
        return build_topology(gpus, nvml_links(self.nvml, gpus))

    def process_note(self, gpu_index: int, pid: int) -> ProcessNote | None:
        return None  # /proc and the drivers say all there is

    def ranks_run_on_cpu(self, devices: Sequence[str]) -> bool:
        return False

    # The drivers list a training's processes themselves: nothing to record.
    def training_started(self, gpu_indexes: Sequence[int], pid: int, training_id: str,
                         memory_estimate: int | None, *, busy: bool = True) -> None:
        pass

    def context_bytes(self, gpus: Sequence[GPUInfo]) -> dict[int, int]:
        from gpufleet.devices.context_probe import probe_contexts

        if self.nvml is None:
            return {}
        if self._contexts is None:
            self._contexts = probe_contexts(self.nvml, gpus)
        return self._contexts

    def training_ended(self, pid: int) -> None:
        pass
