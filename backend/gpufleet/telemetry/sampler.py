"""The GPU sampler: one :class:`GPUSample` per GPU per round.

NVIDIA GPUs are read through the NVML of the host's device backend
(``backend.nvml``: ``pynvml``, or an object with its functions), with handles
opened once. Each field is asked through
:class:`FieldGuard`: a field the driver does not support (or forbids) is
``None`` from then on and never asked again, because a refused call costs as
much as a successful one every second. A GPU that is lost is reported as
``lost`` and re-opened every ``reopen_lost_s``; the other GPUs keep sampling.

PCIe and NVLink throughput and ECC counts are read at the slow cadence
(``slow_sample_interval_s``) and repeated in between; XID errors come from an
NVML event set, drained without waiting each round.

AMD and Intel GPUs are sampled by :mod:`gpufleet.telemetry.vendors`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import partial
from typing import Any, Callable

from gpufleet.config import HostSettings, TelemetrySettings
from gpufleet.devices.backend import DeviceBackend
from gpufleet.telemetry.gpu_health import FATAL_XIDS
from gpufleet.telemetry.nvml_health import read_health
from gpufleet.telemetry.owners import TrainingOwners, process_command, process_user
from gpufleet.telemetry.sample import GPUProcess, GPUSample

log = logging.getLogger(__name__)

# NVML errors that mean "this GPU will never answer this": stop asking.
_PERMANENT = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_NO_PERMISSION", "NVML_ERROR_FUNCTION_NOT_FOUND")


class GpuLost(Exception):
    pass


@dataclass
class FieldGuard:
    """Remembers, per GPU, the fields that refused, and backs off flaky ones."""

    nvml: Any
    disabled: dict[tuple[int, str], str] = field(default_factory=dict)
    failures: dict[tuple[int, str], int] = field(default_factory=dict)
    paused_until: dict[tuple[int, str], float] = field(default_factory=dict)
    calls: int = 0

    def __post_init__(self) -> None:
        self._said: set[tuple[str, str]] = set()
        self._permanent = {getattr(self.nvml, n) for n in _PERMANENT if hasattr(self.nvml, n)}
        self._lost = getattr(self.nvml, "NVML_ERROR_GPU_IS_LOST", 15)

    def read(self, index: int, name: str, fn: Callable[[], Any]) -> Any:
        key = (index, name)
        if key in self.disabled:
            return None
        if self.paused_until.get(key, 0.0) > time.monotonic():
            return None
        self.calls += 1
        try:
            value = fn()
        except self.nvml.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code == self._lost:
                raise GpuLost(str(exc)) from None
            if code in self._permanent:
                self.refuse(index, name, str(exc))
                return None
            n = self.failures[key] = self.failures.get(key, 0) + 1
            if n >= 5:
                # Something transient keeps failing: ask again in a minute, not every second.
                self.paused_until[key] = time.monotonic() + 60.0
                self.failures[key] = 0
                log.warning("GPU %d: %s failed %d times (%s); pausing it for 60 s", index, name, n, exc)
            return None
        self.failures.pop(key, None)
        return value

    def refuse(self, index: int, name: str, why: str) -> None:
        """Stop asking GPU ``index`` for ``name``; say so once per field, not once per GPU."""
        self.disabled[(index, name)] = why
        if (name, why) in self._said:
            log.debug("GPU %d: %s is not available (%s)", index, name, why)
            return
        self._said.add((name, why))
        log.info("%s is not available on GPU %d (%s); not asking again on GPUs that refuse it",
                 name, index, why)

    def forget(self, index: int) -> None:
        for d in (self.disabled, self.failures, self.paused_until):
            for key in [k for k in d if k[0] == index]:
                del d[key]


@dataclass
class _Slow:
    pcie_tx: int | None = None
    pcie_rx: int | None = None
    nvlink_tx: int | None = None
    nvlink_rx: int | None = None
    ecc_errors: int | None = None
    nvlink_counters: tuple[float, int, int] | None = None  # (monotonic time, tx KiB, rx KiB)
    health: dict[str, Any] = field(default_factory=dict)  # GPUSample's dcgm-exporter fields, by name


class NvmlSampler:
    """Samples the NVIDIA GPUs of this host through NVML."""

    def __init__(self, telemetry_settings: TelemetrySettings, host_settings: HostSettings, backend: DeviceBackend,
                 owners: TrainingOwners | None = None, reopen_lost_s: float = 30.0) -> None:
        self.telemetry_settings, self.host_settings = telemetry_settings, host_settings
        self.backend = backend
        self.nvml = nvml = backend.nvml
        self.owners = owners
        self.reopen_lost_s = reopen_lost_s
        self.guard = FieldGuard(nvml)
        self.handles: dict[int, Any] = {}
        self.info: dict[int, dict[str, Any]] = {}
        self.lost: dict[int, float] = {}  # index -> monotonic time it was lost
        self.slow: dict[int, _Slow] = {}
        self.xid_counts: dict[int, int] = {}
        self.last_xid: dict[int, int] = {}
        self.fatal_xids: dict[int, list[int]] = {}
        self._last_slow = -1e9
        self._events: Any = None
        self._handle_index: dict[Any, int] = {}
        nvml.nvmlInit()
        try:
            self.driver_version: str | None = _text(nvml.nvmlSystemGetDriverVersion())
        except nvml.NVMLError:
            self.driver_version = None
        count = nvml.nvmlDeviceGetCount()
        for i in range(count):
            self._open(i)
        self._open_events()

    def _open(self, i: int) -> None:
        n = self.nvml
        try:
            h = n.nvmlDeviceGetHandleByIndex(i)
        except n.NVMLError as exc:
            self.lost[i] = time.monotonic()
            log.warning("GPU %d cannot be opened: %s", i, exc)
            return
        self.handles[i] = h
        self._handle_index[self._handle_key(h)] = i
        try:
            self.info[i] = {
                "uuid": self.guard.read(i, "uuid", lambda: _text(n.nvmlDeviceGetUUID(h))),
                "name": self.guard.read(i, "name", lambda: _text(n.nvmlDeviceGetName(h))),
            }
            self.lost.pop(i, None)
        except GpuLost:
            self.lost[i] = time.monotonic()
            self.info.setdefault(i, {})

    @staticmethod
    def _handle_key(h: Any) -> Any:
        # pynvml's handles are ctypes pointers (the same device gives the same
        # address); any other handle is compared as a value.
        if hasattr(h, "contents"):
            import ctypes

            return ctypes.cast(h, ctypes.c_void_p).value
        return h

    def _open_events(self) -> None:
        n = self.nvml
        try:
            self._events = n.nvmlEventSetCreate()
        except n.NVMLError as exc:
            log.info("XID events are not available: %s", exc)
            return
        for i, h in self.handles.items():
            self.guard.read(i, "events", partial(n.nvmlDeviceRegisterEvents,
                                                 h, n.nvmlEventTypeXidCriticalError, self._events))
            self.xid_counts.setdefault(i, 0)

    def _drain_xids(self) -> None:
        n = self.nvml
        if self._events is None:
            return
        for _ in range(1000):
            try:
                ev = n.nvmlEventSetWait_v2(self._events, 0)
            except n.NVMLError:
                return  # timeout: nothing more now
            i = self._handle_index.get(self._handle_key(ev.device))
            if i is None:
                try:
                    i = n.nvmlDeviceGetIndex(ev.device)
                except n.NVMLError:
                    continue
            self.xid_counts[i] = self.xid_counts.get(i, 0) + 1
            self.last_xid[i] = int(ev.eventData)
            if int(ev.eventData) in FATAL_XIDS:
                self.fatal_xids.setdefault(i, []).append(int(ev.eventData))
            log.warning("GPU %d reported XID %s", i, ev.eventData)

    def close(self) -> None:
        try:
            if self._events is not None:
                self.nvml.nvmlEventSetFree(self._events)
            self.nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting down anyway
            pass

    def sample(self, ts: datetime | None = None) -> list[GPUSample]:
        ts = ts or datetime.now(timezone.utc)
        now = time.monotonic()
        slow_due = now - self._last_slow >= self.telemetry_settings.slow_sample_interval_s
        if slow_due:
            self._last_slow = now
        self._drain_xids()
        out = []
        indexes = sorted(set(self.handles) | set(self.lost))
        for i in indexes:
            if i in self.lost and now - self.lost[i] >= self.reopen_lost_s:
                self.guard.forget(i)
                self._open(i)
            out.append(self._sample_one(i, ts, slow_due))
        return out

    def _read_memory(self, i: int, h: Any, s: GPUSample) -> None:
        """Used, total and free as NVML's first memory call gives them (used counts what the driver
        reserves); the reserved part from its v2 call, on drivers that have it."""
        n, g = self.nvml, self.guard
        v2 = getattr(n, "nvmlMemory_v2", None)
        mem = g.read(i, "memory_v2", lambda: n.nvmlDeviceGetMemoryInfo(h, version=v2)) if v2 else None
        if mem is not None:
            reserved = int(mem.reserved)
            s.memory_reserved = reserved
            s.memory_used, s.memory_total, s.memory_free = int(mem.used) + reserved, int(mem.total), int(mem.free)
            return
        mem = g.read(i, "memory", lambda: n.nvmlDeviceGetMemoryInfo(h))
        if mem is not None:
            s.memory_used, s.memory_total, s.memory_free = int(mem.used), int(mem.total), int(mem.free)

    def _sample_one(self, i: int, ts: datetime, slow_due: bool) -> GPUSample:
        info = self.info.get(i, {})
        s = GPUSample(host=self.host_settings.host_name, index=i, timestamp=ts, uuid=info.get("uuid"),
                      name=info.get("name"), vendor="nvidia", simulated=self.backend.simulated,
                      driver_version=self.driver_version)
        h = self.handles.get(i)
        if i in self.lost or h is None:
            s.lost, s.error = True, "GPU is lost (fell off the bus or the driver lost it)"
            return s
        n, g = self.nvml, self.guard
        try:
            util = g.read(i, "utilization", lambda: n.nvmlDeviceGetUtilizationRates(h))
            if util is not None:
                s.utilization, s.memory_util = float(util.gpu), float(util.memory)
            self._read_memory(i, h, s)
            temp = g.read(i, "temperature", lambda: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU))
            s.temperature = None if temp is None else float(temp)
            mw = g.read(i, "power", lambda: n.nvmlDeviceGetPowerUsage(h))
            s.power_draw = None if mw is None else mw / 1000.0
            lim = g.read(i, "power_limit", lambda: n.nvmlDeviceGetEnforcedPowerLimit(h))
            s.power_limit = None if lim is None else lim / 1000.0
            s.sm_clock = g.read(i, "sm_clock", lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM))
            s.mem_clock = g.read(i, "mem_clock", lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM))
            s.processes = self._processes(i, h)
            if slow_due:
                self._read_slow(i, h)
        except GpuLost as exc:
            self.lost[i] = time.monotonic()
            log.error("GPU %d is lost: %s; the other GPUs keep sampling", i, exc)
            return GPUSample(host=s.host, index=i, timestamp=ts, uuid=s.uuid, name=s.name, vendor="nvidia",
                             lost=True, error=f"GPU is lost: {exc}", simulated=s.simulated)
        slow = self.slow.get(i, _Slow())
        s.pcie_tx, s.pcie_rx = slow.pcie_tx, slow.pcie_rx
        s.nvlink_tx, s.nvlink_rx = slow.nvlink_tx, slow.nvlink_rx
        s.ecc_errors = slow.ecc_errors
        s.xid_errors = self.xid_counts.get(i) if self._events is not None else None
        s.last_xid = (self.last_xid.get(i, 0)) if self._events is not None else None
        fatal = self.fatal_xids.get(i, [])
        s.fatal_xid_count, s.last_fatal_xid = len(fatal), (fatal[-1] if fatal else None)
        for name, value in slow.health.items():
            setattr(s, name, value)
        return s

    def _read_slow(self, i: int, h: Any) -> None:
        n, g = self.nvml, self.guard
        slow = self.slow.setdefault(i, _Slow())
        tx = g.read(i, "pcie_throughput", lambda: n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_TX_BYTES))
        rx = g.read(i, "pcie_throughput_rx", lambda: n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_RX_BYTES))
        # NVML reports PCIe throughput in KB/s.
        slow.pcie_tx = None if tx is None else int(tx) * 1024
        slow.pcie_rx = None if rx is None else int(rx) * 1024
        slow.ecc_errors = g.read(i, "ecc", lambda: n.nvmlDeviceGetTotalEccErrors(
            h, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_VOLATILE_ECC))
        slow.health = read_health(n, g, i, h)
        vals = g.read(i, "nvlink", lambda: n.nvmlDeviceGetFieldValues(
            h, [n.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, n.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX]))
        if vals is not None:
            try:
                # Each field carries its own return code; a GPU without NVLink says NOT_SUPPORTED there.
                refused = next((int(v.nvmlReturn) for v in vals[:2] if int(v.nvmlReturn) != 0), None)
                txk, rxk = int(vals[0].value.ullVal), int(vals[1].value.ullVal)
            except (AttributeError, IndexError, TypeError, ValueError):
                return
            if refused is not None:
                g.refuse(i, "nvlink", str(n.NVMLError(refused)))
                return
            # Cumulative KiB counters: the rate is the difference over time.
            now = time.monotonic()
            prev = slow.nvlink_counters
            slow.nvlink_counters = (now, txk, rxk)
            slow.health["nvlink_total_kib"] = txk + rxk
            if prev is not None and now > prev[0]:
                dt = now - prev[0]
                slow.nvlink_tx = int(max(0, txk - prev[1]) * 1024 / dt)
                slow.nvlink_rx = int(max(0, rxk - prev[2]) * 1024 / dt)

    def _processes(self, i: int, h: Any) -> list[GPUProcess]:
        n, g = self.nvml, self.guard
        compute = g.read(i, "processes", lambda: n.nvmlDeviceGetComputeRunningProcesses(h)) or []
        graphics = g.read(i, "graphics_processes", lambda: n.nvmlDeviceGetGraphicsRunningProcesses(h)) or []
        out: dict[int, GPUProcess] = {}
        for p in list(compute) + list(graphics):
            pid = int(p.pid)
            used = getattr(p, "usedGpuMemory", None)
            used = int(used) if isinstance(used, int) else None
            if pid in out:
                out[pid].used_memory = (out[pid].used_memory or 0) + (used or 0)
                continue
            user, command, noted_tid = process_user(pid), process_command(pid), None
            note = self.backend.process_note(i, pid)
            if note is not None:
                user, command, noted_tid = user or note.user, command or note.command, note.training_id
            if command is None:
                try:
                    command = _text(n.nvmlSystemGetProcessName(pid))
                except n.NVMLError:
                    pass
            tid = self.owners.owner(pid, noted_tid, i, user) if self.owners else None
            out[pid] = GPUProcess(pid=pid, user=user, command=command, used_memory=used, training_id=tid,
                                  job_type="training" if tid else None, foreign=tid is None)
        return sorted(out.values(), key=lambda p: p.pid)


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)
