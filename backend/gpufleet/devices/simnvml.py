"""A simulated NVML: the ``pynvml`` API over a fleet described by settings.

The simulated device backend's ``nvml``
(:class:`~gpufleet.devices.simulated.SimulatedBackend`) is a :class:`SimNVML`. It is a module-like object: the
same function names, signatures and return shapes as ``pynvml`` (``.total/.free/.used``,
``.gpu/.memory``, ``.pid/.usedGpuMemory``, ``.busId``…), the same constants,
and the real ``pynvml.NVMLError`` subclasses, so ``except
pynvml.NVMLError_NotSupported`` works on both. Code that reads GPUs runs the
same path on a real and on a simulated fleet.

Only NVIDIA GPUs of the spec are visible here, as on a real host where NVML
does not list AMD or Intel GPUs; the simulated ``amdsmi`` and ``xpu-smi``
report those (see :meth:`SimulatedBackend.detect_gpus
<gpufleet.devices.simulated.SimulatedBackend.detect_gpus>`).

What changes over time (processes, refused fields, lost GPUs, XID errors, ECC
counts) is read from :mod:`gpufleet.devices.simstate` on every call, so a test
or the worker in another process changes what this NVML reports.

A ``pynvml`` function the simulator does not implement raises
``NVMLError_FunctionNotFound`` (what an older driver does); a name that real
``pynvml`` lacks raises ``AttributeError``, as the real module would.
"""

from __future__ import annotations

import inspect
import threading
import time
from typing import Any

import pynvml

import gpufleet.devices.simspecs as simspecs
import gpufleet.devices.simstate as simstate
from gpufleet.devices.simevents import NO_INSTANCE, SimEventsMixin, SimHandle
from gpufleet.devices.simhealth import SimHealthMixin
from gpufleet.devices.simlimits import DRIVER_VERSION, SimLimitsMixin  # noqa: F401 - read here by callers
from gpufleet.devices.simmetrics import BASELINE_USED, read_gpu

CUDA_DRIVER_VERSION = 12060

_LEVELS = {
    "PIX": pynvml.NVML_TOPOLOGY_SINGLE,
    "PXB": pynvml.NVML_TOPOLOGY_MULTIPLE,
    "PHB": pynvml.NVML_TOPOLOGY_HOSTBRIDGE,
    "NODE": pynvml.NVML_TOPOLOGY_NODE,
    "SYS": pynvml.NVML_TOPOLOGY_SYSTEM,
}
# pynvml's API calls (as opposed to its helpers such as nvmlFriendlyObject).
_API_PREFIXES = ("nvmlDevice", "nvmlSystem", "nvmlEventSet", "nvmlUnit", "nvmlVgpu", "nvmlGpuInstance",
                 "nvmlComputeInstance", "nvmlGetVgpu", "nvmlSetVgpu", "nvmlGpm")


def _err(code: int) -> pynvml.NVMLError:
    # NVMLError(code) returns the matching subclass (NVMLError_GpuIsLost, …).
    return pynvml.NVMLError(code)


def _error_code(reason: str) -> int:
    return getattr(pynvml, "NVML_ERROR_" + reason.upper())


class SimNVML(SimLimitsMixin, SimHealthMixin, SimEventsMixin):
    """The simulated ``pynvml`` for one fleet (spec, topology, state dir, host)."""

    def __init__(self, spec: str, topology: str, state_dir: Any, host_name: str = "localhost"):
        if topology not in simspecs.TOPOLOGIES:
            raise ValueError(f"unknown topology {topology!r}; one of {', '.join(simspecs.TOPOLOGIES)}")
        self.spec = spec
        self.topology = topology
        self.state_dir = simstate.state_dir(state_dir)
        self.host_name = host_name
        self.fleet = simspecs.build_fleet(spec, host_name)
        self.nvidia = [g for g in self.fleet if g.vendor == "nvidia"]
        self._refcount = 0
        self._lock = threading.Lock()
        # Per GPU: (monotonic time, tx KiB, rx KiB) of the NVLink counters.
        self._nvlink: dict[int, tuple[float, int, int]] = {}

    def __repr__(self) -> str:
        return f"<simulated pynvml {self.spec} {self.topology}>"

    # Constants and error classes are pynvml's own.
    def __getattr__(self, name: str) -> Any:
        if name.startswith(_API_PREFIXES) and inspect.isfunction(getattr(pynvml, name, None)):
            def not_simulated(*args: Any, **kwargs: Any) -> Any:
                raise _err(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

            return not_simulated
        try:
            return getattr(pynvml, name)
        except AttributeError:
            raise AttributeError(f"pynvml has no attribute {name!r}") from None

    # -- library ---------------------------------------------------------

    def nvmlInit(self) -> None:
        self.nvmlInitWithFlags(0)

    def nvmlInitWithFlags(self, flags: int) -> None:
        with self._lock:
            self._refcount += 1

    def nvmlShutdown(self) -> None:
        with self._lock:
            if self._refcount == 0:
                raise _err(pynvml.NVML_ERROR_UNINITIALIZED)
            self._refcount -= 1

    def _check_init(self) -> None:
        if self._refcount <= 0:
            raise _err(pynvml.NVML_ERROR_UNINITIALIZED)

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._check_init()
        return f"12.{self.nvmlSystemGetDriverVersion()}"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._check_init()
        return CUDA_DRIVER_VERSION

    nvmlSystemGetCudaDriverVersion_v2 = nvmlSystemGetCudaDriverVersion

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        self._check_init()
        proc = simstate.describe_process(self.state_dir, pid)
        if proc is None:
            raise _err(pynvml.NVML_ERROR_NOT_FOUND)
        return proc.name

    # -- handles ---------------------------------------------------------

    def nvmlDeviceGetCount(self) -> int:
        self._check_init()
        return len(self.nvidia)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> SimHandle:
        self._check_init()
        if not isinstance(index, int) or not 0 <= index < len(self.nvidia):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if index in simstate.read_state(self.state_dir).lost:
            raise _err(pynvml.NVML_ERROR_GPU_IS_LOST)
        return SimHandle(index)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> SimHandle:
        self._check_init()
        for g in self.nvidia:
            if g.uuid == uuid:
                return self.nvmlDeviceGetHandleByIndex(g.index)
        raise _err(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetHandleByPciBusId(self, pciBusId: str) -> SimHandle:
        self._check_init()
        for g in self.nvidia:
            if g.pci_bus_id.lower() == pciBusId.lower():
                return self.nvmlDeviceGetHandleByIndex(g.index)
        raise _err(pynvml.NVML_ERROR_NOT_FOUND)

    def _dev(self, handle: Any, what: str) -> tuple[simspecs.SimGPU, simstate.SimState]:
        """The GPU behind ``handle``, or the error NVML would give for ``what``."""
        self._check_init()
        if not isinstance(handle, SimHandle) or not 0 <= handle.index < len(self.nvidia):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        state = simstate.read_state(self.state_dir)
        if handle.index in state.lost:
            raise _err(pynvml.NVML_ERROR_GPU_IS_LOST)
        reason = state.refused.get(handle.index, {}).get(what)
        if reason is not None:
            raise _err(_error_code(reason))
        return self.nvidia[handle.index], state

    def nvmlDeviceGetIndex(self, handle: SimHandle) -> int:
        return self._dev(handle, "")[0].index

    # -- identity --------------------------------------------------------

    def nvmlDeviceGetName(self, handle: SimHandle) -> str:
        return self._dev(handle, "name")[0].name

    def nvmlDeviceGetUUID(self, handle: SimHandle) -> str:
        return self._dev(handle, "uuid")[0].uuid

    def _pci_info(self, bus_id: str, device_id: int) -> pynvml.nvmlPciInfo_t:
        domain, bus, rest = bus_id.split(":")
        info = pynvml.nvmlPciInfo_t()
        info.busId = bus_id.encode()
        info.busIdLegacy = f"{int(domain, 16):04X}:{bus}:{rest}".encode()
        info.domain, info.bus, info.device = int(domain, 16), int(bus, 16), int(rest.split(".")[0], 16)
        info.pciDeviceId = device_id
        info.pciSubSystemId = (device_id & 0xFFFF) << 16 | (device_id & 0xFFFF)
        return info

    def nvmlDeviceGetPciInfo(self, handle: SimHandle) -> pynvml.nvmlPciInfo_t:
        gpu, _ = self._dev(handle, "pci")
        return self._pci_info(gpu.pci_bus_id, gpu.spec.pci_device_id)

    nvmlDeviceGetPciInfo_v3 = nvmlDeviceGetPciInfo

    def nvmlDeviceGetCudaComputeCapability(self, handle: SimHandle) -> tuple[int, int]:
        gpu, _ = self._dev(handle, "compute_capability")
        return gpu.spec.compute_capability or (8, 0)

    # -- live readings ---------------------------------------------------

    def _reading(self, handle: SimHandle, what: str):
        gpu, state = self._dev(handle, what)
        return read_gpu(gpu, simstate.live_processes(state, gpu.index), idle=gpu.index in state.idle)

    def nvmlDeviceGetMemoryInfo(self, handle: SimHandle, version: int | None = None) -> Any:
        r = self._reading(handle, "memory")
        if version:
            # v2 tells the driver's own share apart: "used" is then what processes hold.
            mem = pynvml.c_nvmlMemory_v2_t()
            mem.version = version
            mem.reserved = min(BASELINE_USED, r.memory_used)
            mem.total, mem.used, mem.free = r.memory_total, r.memory_used - mem.reserved, r.memory_free
            return mem
        mem = pynvml.c_nvmlMemory_t()
        mem.total, mem.used, mem.free = r.memory_total, r.memory_used, r.memory_free
        return mem

    def nvmlDeviceGetUtilizationRates(self, handle: SimHandle) -> pynvml.c_nvmlUtilization_t:
        r = self._reading(handle, "utilization")
        util = pynvml.c_nvmlUtilization_t()
        util.gpu, util.memory = r.utilization, r.memory_utilization
        return util

    def nvmlDeviceGetTemperature(self, handle: SimHandle, sensor: int) -> int:
        r = self._reading(handle, "temperature")
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return r.temperature

    def nvmlDeviceGetPowerUsage(self, handle: SimHandle) -> int:
        return self._reading(handle, "power").power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: SimHandle) -> int:
        return self._reading(handle, "power_limit").power_limit_mw

    nvmlDeviceGetPowerManagementLimit = nvmlDeviceGetEnforcedPowerLimit

    def nvmlDeviceGetClockInfo(self, handle: SimHandle, type: int) -> int:  # noqa: A002 - pynvml's name
        r = self._reading(handle, "clocks")
        if type in (pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_GRAPHICS):
            return r.sm_clock_mhz
        if type == pynvml.NVML_CLOCK_MEM:
            return r.mem_clock_mhz
        if type == pynvml.NVML_CLOCK_VIDEO:
            return int(r.sm_clock_mhz * 0.9)
        raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetMaxClockInfo(self, handle: SimHandle, type: int) -> int:  # noqa: A002
        gpu, _ = self._dev(handle, "clocks")
        if type in (pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_GRAPHICS):
            return gpu.spec.sm_clock_max_mhz
        if type == pynvml.NVML_CLOCK_MEM:
            return gpu.spec.mem_clock_mhz
        raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetPcieThroughput(self, device: SimHandle, counter: int) -> int:
        r = self._reading(device, "pcie_throughput")
        if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES:
            return r.pcie_tx_kbs
        if counter == pynvml.NVML_PCIE_UTIL_RX_BYTES:
            return r.pcie_rx_kbs
        raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def _processes(self, handle: SimHandle, kind: str) -> list[pynvml.nvmlFriendlyObject]:
        gpu, state = self._dev(handle, "processes")
        return [
            pynvml.nvmlFriendlyObject(
                {
                    "pid": p.pid,
                    "usedGpuMemory": p.used_memory,
                    "gpuInstanceId": NO_INSTANCE,
                    "computeInstanceId": NO_INSTANCE,
                }
            )
            for p in simstate.live_processes(state, gpu.index)
            if p.kind == kind
        ]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: SimHandle) -> list[Any]:
        return self._processes(handle, "compute")

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: SimHandle) -> list[Any]:
        return self._processes(handle, "graphics")

    nvmlDeviceGetComputeRunningProcesses_v2 = nvmlDeviceGetComputeRunningProcesses
    nvmlDeviceGetComputeRunningProcesses_v3 = nvmlDeviceGetComputeRunningProcesses
    nvmlDeviceGetGraphicsRunningProcesses_v2 = nvmlDeviceGetGraphicsRunningProcesses
    nvmlDeviceGetGraphicsRunningProcesses_v3 = nvmlDeviceGetGraphicsRunningProcesses

    def nvmlDeviceGetTotalEccErrors(self, handle: SimHandle, errorType: int, counterType: int) -> int:
        gpu, state = self._dev(handle, "ecc")
        if not gpu.spec.ecc:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        counts = state.ecc.get(gpu.index, {})
        if errorType == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED:
            return int(counts.get("corrected", 0))
        if errorType == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED:
            return int(counts.get("uncorrected", 0))
        raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    # -- topology --------------------------------------------------------

    def _link(self, device: SimHandle, link: int) -> str | None:
        gpu, _ = self._dev(device, "nvlink")
        if gpu.spec.nvlinks == 0:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not isinstance(link, int) or not 0 <= link < gpu.spec.nvlinks:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return simspecs.nvlink_wiring(self.fleet, self.topology)[gpu.index][link]

    def nvmlDeviceGetNvLinkState(self, device: SimHandle, link: int) -> int:
        active = self._link(device, link) is not None
        return pynvml.NVML_FEATURE_ENABLED if active else pynvml.NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, device: SimHandle, link: int) -> pynvml.nvmlPciInfo_t:
        remote = self._link(device, link)
        if remote is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        peer = next((g for g in self.fleet if g.pci_bus_id == remote), None)
        # 0x22A3 is an NVSwitch's PCI device id.
        return self._pci_info(remote, peer.spec.pci_device_id if peer else 0x22A310DE)

    nvmlDeviceGetNvLinkRemotePciInfo_v2 = nvmlDeviceGetNvLinkRemotePciInfo

    def nvmlDeviceGetFieldValues(self, handle: SimHandle, fieldIds: list[Any]) -> Any:
        """pynvml's array of ``c_nvmlFieldValue_t``, one per id (or ``(id, scopeId)``).

        Modelled: NVLink data throughput, cumulative KiB counters that grow
        while the GPU is busy, and the memory temperature (°C). Any other field, or NVLink on a GPU without it,
        carries ``NVML_ERROR_NOT_SUPPORTED`` in its own ``nvmlReturn``, as NVML does.
        """
        gpu, state = self._dev(handle, "nvlink")
        values = (pynvml.c_nvmlFieldValue_t * len(fieldIds))()
        tx, rx = self._nvlink_counters(gpu, state)
        now_us = int(time.time() * 1e6)
        for i, field in enumerate(fieldIds):
            field_id, scope = field if isinstance(field, tuple) else (field, 0)
            v = values[i]
            v.fieldId, v.scopeId, v.timestamp, v.latencyUsec = field_id, scope, now_us, 0
            if field_id == pynvml.NVML_FI_DEV_MEMORY_TEMP:
                v.nvmlReturn, v.valueType = pynvml.NVML_SUCCESS, pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
                v.value.uiVal = self._memory_temp(handle)
                continue
            counter = {pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: tx,
                       pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: rx}.get(field_id)
            if counter is None or gpu.spec.nvlinks == 0:
                v.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
                continue
            v.nvmlReturn = pynvml.NVML_SUCCESS
            v.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
            v.value.ullVal = counter
        return values

    def _nvlink_counters(self, gpu: simspecs.SimGPU, state: simstate.SimState) -> tuple[int, int]:
        """Cumulative NVLink (tx, rx) KiB, advanced at the GPU's current rate since the last call."""
        r = read_gpu(gpu, simstate.live_processes(state, gpu.index), idle=gpu.index in state.idle)
        # A busy GPU in an NVLink group moves gradients at about 20x its PCIe rate.
        linked = any(peer is not None for peer in simspecs.nvlink_wiring(self.fleet, self.topology)[gpu.index])
        rate = r.pcie_tx_kbs * 20 if linked and r.utilization > 0 else (r.pcie_tx_kbs if linked else 0)
        with self._lock:
            now = time.monotonic()
            last, tx, rx = self._nvlink.get(gpu.index, (now, 0, 0))
            dt = max(0.0, now - last)
            tx, rx = tx + int(rate * dt), rx + int(rate * dt * 0.97)
            self._nvlink[gpu.index] = (now, tx, rx)
        return tx, rx

    def nvmlDeviceGetTopologyCommonAncestor(self, device1: SimHandle, device2: SimHandle) -> int:
        a, _ = self._dev(device1, "topology")
        b, _ = self._dev(device2, "topology")
        if a.index == b.index:
            return pynvml.NVML_TOPOLOGY_INTERNAL
        return _LEVELS[simspecs.pcie_level(self.topology, a.index, b.index)]

    def nvmlDeviceGetP2PStatus(self, device1: SimHandle, device2: SimHandle, p2pIndex: Any) -> int:
        a, _ = self._dev(device1, "p2p")
        b, _ = self._dev(device2, "p2p")
        # pynvml defines NVML_P2P_CAPS_INDEX_READ as the tuple (0,); accept it.
        index = p2pIndex[0] if isinstance(p2pIndex, tuple) else p2pIndex
        if index == pynvml.NVML_P2P_CAPS_INDEX_NVLINK:
            ok = simspecs.nvlink_count(self.fleet, self.topology, a.index, b.index) > 0
        elif index in (0, pynvml.NVML_P2P_CAPS_INDEX_WRITE, pynvml.NVML_P2P_CAPS_INDEX_ATOMICS,
                       pynvml.NVML_P2P_CAPS_INDEX_PROP):
            ok = simspecs.peer_access(self.fleet, self.topology, a.index, b.index)
        else:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return pynvml.NVML_P2P_STATUS_OK if ok else pynvml.NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED
