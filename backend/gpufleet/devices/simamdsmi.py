"""A simulated ``amdsmi``: the AMD GPUs of a simulated fleet, as ROCm's Python API shows them.

Same function names, parameters, return shapes and units as ``amdsmi`` 6.x
(checked against the real package by ``tests/test_simamdsmi.py``), so
detection and sampling run the code they run on a real ROCm host:

* ``amdsmi_get_gpu_vram_usage`` gives MB, ``amdsmi_get_gpu_memory_total`` /
  ``_usage`` bytes, ``amdsmi_get_temp_metric`` °C, ``amdsmi_get_power_info`` W,
  ``amdsmi_get_gpu_process_list`` dicts with ``mem`` in bytes.
* A field refused with ``gpufleet sim refuse`` (``name``, ``uuid``, ``pci``,
  ``memory``, ``utilization``, ``temperature``, ``power``, ``processes``)
  raises :class:`AmdSmiLibraryException` with ``AMDSMI_STATUS_NOT_SUPPORTED``.
* A lost GPU (``lose_gpu``) keeps its handle but every call on it raises
  ``AMDSMI_STATUS_NOT_FOUND``, as the library does once the device is gone.
* Calls before :meth:`amdsmi_init` raise ``AMDSMI_STATUS_NOT_INIT``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Any, TypeAlias

import gpufleet.devices.simspecs as simspecs
import gpufleet.devices.simstate as simstate
from gpufleet.devices.simmetrics import read_gpu

AMDSMI_STATUS_INVAL = 1
AMDSMI_STATUS_NOT_SUPPORTED = 2
AMDSMI_STATUS_NOT_FOUND = 31
AMDSMI_STATUS_NOT_INIT = 32

_STATUS_TEXT = {
    AMDSMI_STATUS_INVAL: "AMDSMI_STATUS_INVAL - Invalid parameters",
    AMDSMI_STATUS_NOT_SUPPORTED: "AMDSMI_STATUS_NOT_SUPPORTED - Feature not supported",
    AMDSMI_STATUS_NOT_FOUND: "AMDSMI_STATUS_NOT_FOUND - Device Not found",
    AMDSMI_STATUS_NOT_INIT: "AMDSMI_STATUS_NOT_INIT - Device not initialized",
}
# Field names of the simulator's refusals, by the amdsmi call that reads them.
_FIELD_OF_CALL = {
    "asic": "name",
    "uuid": "uuid",
    "bdf": "pci",
    "memory": "memory",
    "activity": "utilization",
    "temp": "temperature",
    "power": "power",
    "processes": "processes",
}


class AmdSmiException(Exception):
    """Base class of amdsmi's errors."""


class AmdSmiLibraryException(AmdSmiException):
    def __init__(self, err_code: int) -> None:
        err_code = abs(err_code)
        super().__init__(err_code)
        self.err_code = err_code
        self.err_info = _STATUS_TEXT.get(err_code, f"unknown status {err_code}")

    def __str__(self) -> str:
        return f"Error code:\n\t{self.err_code} | {self.err_info}"

    def get_error_code(self) -> int:
        return self.err_code

    def get_error_info(self) -> str:
        return self.err_info


class AmdSmiParameterException(AmdSmiException):
    def __init__(self, receivedValue: Any, expectedType: Any, msg: str | None = None) -> None:
        super().__init__(msg or f"invalid parameter {receivedValue!r}, expected {expectedType}")


class AmdSmiInitFlags(IntEnum):
    INIT_ALL_PROCESSORS = 0xFFFFFFFF
    INIT_AMD_CPUS = 1
    INIT_AMD_GPUS = 2
    INIT_NON_AMD_CPUS = 4
    INIT_NON_AMD_GPUS = 8
    INIT_AMD_APUS = 3


class AmdSmiMemoryType(IntEnum):
    VRAM = 0
    VIS_VRAM = 1
    GTT = 2


class AmdSmiTemperatureType(IntEnum):
    EDGE = 0
    HOTSPOT = 1
    JUNCTION = 1
    VRAM = 2


class AmdSmiTemperatureMetric(IntEnum):
    CURRENT = 0
    MAX = 1
    MIN = 2
    CRITICAL = 5


@dataclass(frozen=True)
class processor_handle:  # amdsmi's own name for the handle type
    """Opaque handle of one simulated AMD GPU (its fleet index inside)."""

    fleet_index: int


class SimAmdSmi:
    """The ``amdsmi`` module over one simulated fleet (see :func:`get_amdsmi`)."""

    AmdSmiException = AmdSmiException
    AmdSmiLibraryException = AmdSmiLibraryException
    AmdSmiParameterException = AmdSmiParameterException
    # Aliases, not variables: the method annotations below name these enums.
    AmdSmiInitFlags: TypeAlias = AmdSmiInitFlags
    AmdSmiMemoryType: TypeAlias = AmdSmiMemoryType
    AmdSmiTemperatureType: TypeAlias = AmdSmiTemperatureType
    AmdSmiTemperatureMetric: TypeAlias = AmdSmiTemperatureMetric

    def __init__(self, spec: str, state_dir: Path, host_name: str = "localhost") -> None:
        self.spec, self.state_dir, self.host_name = spec, Path(state_dir), host_name
        self._inits = 0

    # -- library ------------------------------------------------------------

    def amdsmi_init(self, flag: AmdSmiInitFlags = AmdSmiInitFlags.INIT_AMD_GPUS) -> None:
        if not isinstance(flag, int):
            raise AmdSmiParameterException(flag, AmdSmiInitFlags)
        self._inits += 1

    def amdsmi_shut_down(self) -> None:
        if self._inits == 0:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_INIT)
        self._inits -= 1

    def amdsmi_get_processor_handles(self) -> list[processor_handle]:
        self._need_init()
        return [processor_handle(g.index) for g in self._fleet() if g.vendor == "amd"]

    # -- static information ---------------------------------------------------

    def amdsmi_get_gpu_asic_info(self, processor_handle: processor_handle) -> dict[str, Any]:
        g = self._gpu(processor_handle, "asic")
        return {
            "market_name": g.name,
            "vendor_id": "0x1002",
            "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]",
            "subvendor_id": "0x1002",
            "device_id": hex(g.spec.pci_device_id >> 16),
            "rev_id": "0x00",
            "asic_serial": g.uuid.replace("-", "")[:16].upper(),
            "oam_id": g.device_id,
            "num_compute_units": 304,
            "target_graphics_version": "gfx942",
        }

    def amdsmi_get_gpu_device_uuid(self, processor_handle: processor_handle) -> str:
        return self._gpu(processor_handle, "uuid").uuid

    def amdsmi_get_gpu_device_bdf(self, processor_handle: processor_handle) -> str:
        # amdsmi writes the domain with four hex digits: "0000:18:00.0".
        return self._gpu(processor_handle, "bdf").pci_bus_id[4:].lower()

    # -- live readings ----------------------------------------------------------

    def amdsmi_get_gpu_memory_total(self, processor_handle: processor_handle, mem_type: AmdSmiMemoryType) -> int:
        self._mem_type(mem_type)
        return self._reading(processor_handle, "memory").memory_total

    def amdsmi_get_gpu_memory_usage(self, processor_handle: processor_handle, mem_type: AmdSmiMemoryType) -> int:
        self._mem_type(mem_type)
        return self._reading(processor_handle, "memory").memory_used

    def amdsmi_get_gpu_vram_usage(self, processor_handle: processor_handle) -> dict[str, Any]:
        r = self._reading(processor_handle, "memory")
        return {"vram_total": r.memory_total // 2**20, "vram_used": r.memory_used // 2**20}

    def amdsmi_get_gpu_activity(self, processor_handle: processor_handle) -> dict[str, Any]:
        r = self._reading(processor_handle, "activity")
        # MI300X has no multimedia activity counter: amdsmi gives "N/A".
        return {"gfx_activity": r.utilization, "umc_activity": r.memory_utilization, "mm_activity": "N/A"}

    def amdsmi_get_temp_metric(self, processor_handle: processor_handle, sensor_type: AmdSmiTemperatureType,
                               metric: AmdSmiTemperatureMetric) -> int:
        r = self._reading(processor_handle, "temp")
        if metric == AmdSmiTemperatureMetric.CURRENT:
            return r.temperature + (8 if sensor_type != AmdSmiTemperatureType.EDGE else 0)
        if metric == AmdSmiTemperatureMetric.CRITICAL:
            return 105
        raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)

    def amdsmi_get_power_info(self, processor_handle: processor_handle, sensor_ind: int = 0) -> dict[str, Any]:
        r = self._reading(processor_handle, "power")
        # MI300X reports only the current socket power; the average is "N/A".
        return {
            "current_socket_power": r.power_mw // 1000,
            "average_socket_power": "N/A",
            "gfx_voltage": "N/A",
            "soc_voltage": "N/A",
            "mem_voltage": "N/A",
            "power_limit": r.power_limit_mw // 1000,
        }

    def amdsmi_get_gpu_process_list(self, processor_handle: processor_handle) -> list[dict[str, Any]]:
        g = self._gpu(processor_handle, "processes")
        return [
            {
                "name": p.name,
                "pid": p.pid,
                "mem": p.used_memory,
                "engine_usage": {"gfx": 0, "enc": 0},
                "memory_usage": {"gtt_mem": 0, "cpu_mem": 0, "vram_mem": p.used_memory},
                "cu_occupancy": 0,
            }
            for p in simstate.live_processes(self._state(), g.index)
        ]

    # -- helpers ------------------------------------------------------------------

    def _fleet(self) -> tuple[simspecs.SimGPU, ...]:
        return simspecs.build_fleet(self.spec, self.host_name)

    def _state(self) -> simstate.SimState:
        return simstate.read_state(self.state_dir)

    def _need_init(self) -> None:
        if self._inits == 0:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_INIT)

    @staticmethod
    def _mem_type(mem_type: Any) -> None:
        if not isinstance(mem_type, int):
            raise AmdSmiParameterException(mem_type, AmdSmiMemoryType)

    def _gpu(self, handle: Any, call: str) -> simspecs.SimGPU:
        self._need_init()
        if not isinstance(handle, processor_handle):
            raise AmdSmiParameterException(handle, processor_handle)
        fleet = self._fleet()
        if not 0 <= handle.fleet_index < len(fleet) or fleet[handle.fleet_index].vendor != "amd":
            raise AmdSmiLibraryException(AMDSMI_STATUS_INVAL)
        state = self._state()
        if handle.fleet_index in state.lost:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_FOUND)
        if _FIELD_OF_CALL[call] in state.refused.get(handle.fleet_index, {}):
            raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)
        return fleet[handle.fleet_index]

    def _reading(self, handle: Any, call: str) -> Any:
        g = self._gpu(handle, call)
        state = self._state()
        return read_gpu(g, simstate.live_processes(state, g.index), idle=g.index in state.idle)
