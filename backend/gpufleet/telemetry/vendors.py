"""Sampling every GPU of this host: NVIDIA through NVML, AMD through amdsmi, Intel through xpu-smi.

:class:`HostSampler` is what the agent calls once per round. NVIDIA GPUs are
read by :class:`~gpufleet.telemetry.sampler.NvmlSampler`. AMD GPUs report
what ``amdsmi`` gives (utilization, VRAM, temperature, power, processes) and
Intel GPUs what ``xpu-smi stats`` gives (utilization, memory, temperature,
power, clock); every other field is ``None``. Without ``amdsmi``/``xpu-smi``
those GPUs report the memory size found at detection: the other live source,
``torch.xpu``/HIP, would mean importing torch in the API process.
The libraries come from the host's device backend, so the same code reads a
real and a simulated fleet.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any

from gpufleet.config import Settings
from gpufleet.devices.backend import DeviceBackend, device_backend
from gpufleet.devices.detect import amdsmi_fatal
from gpufleet.devices.types import GPUInfo
from gpufleet.devices.xpusmi import MIB, XpuSmiError, stats_with
from gpufleet.telemetry.owners import TrainingOwners, process_command, process_user
from gpufleet.telemetry.sample import GPUProcess, GPUSample
from gpufleet.telemetry.sampler import NvmlSampler

log = logging.getLogger(__name__)


def _num(v: Any) -> float | None:
    """amdsmi's number, or None for its "N/A"."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


class _AmdSmi:
    """Live AMD readings through ``amdsmi``; every field it refuses is None."""

    def __init__(self, amdsmi: Any) -> None:
        self.m = amdsmi
        amdsmi.amdsmi_init()
        self.handles = list(amdsmi.amdsmi_get_processor_handles())

    def close(self) -> None:
        try:
            self.m.amdsmi_shut_down()
        except Exception:  # noqa: BLE001
            pass

    def read(self, device_id: int, s: GPUSample) -> list[dict[str, Any]]:
        """Fill ``s``; returns amdsmi's process list (empty when refused)."""
        m = self.m
        if device_id >= len(self.handles):
            s.lost, s.error = True, "amdsmi no longer lists this GPU"
            return []
        h = self.handles[device_id]
        lost: list[str] = []

        def ask(fn: Any, *args: Any) -> Any:
            if lost:
                return None
            try:
                return fn(h, *args)
            except Exception as exc:  # noqa: BLE001 - amdsmi raises its own error types per field
                if amdsmi_fatal(exc):
                    lost.append(str(exc).replace("\n\t", " "))
                return None

        act = ask(m.amdsmi_get_gpu_activity) or {}
        s.utilization, s.memory_util = _num(act.get("gfx_activity")), _num(act.get("umc_activity"))
        vram = ask(m.amdsmi_get_gpu_vram_usage) or {}
        if _num(vram.get("vram_total")) is not None and _num(vram.get("vram_used")) is not None:
            # amdsmi reports VRAM usage in MB.
            s.memory_total = int(vram["vram_total"]) * 2**20
            s.memory_used = int(vram["vram_used"]) * 2**20
            s.memory_free = s.memory_total - s.memory_used
        else:
            s.memory_total = None
        t = ask(m.amdsmi_get_temp_metric, m.AmdSmiTemperatureType.EDGE, m.AmdSmiTemperatureMetric.CURRENT)
        s.temperature = _num(t)
        power = ask(m.amdsmi_get_power_info) or {}
        s.power_draw = _num(power.get("current_socket_power"))
        if s.power_draw is None:
            s.power_draw = _num(power.get("average_socket_power"))
        s.power_limit = _num(power.get("power_limit"))
        procs = ask(m.amdsmi_get_gpu_process_list) or []
        if lost:
            s.lost, s.error = True, f"amdsmi: GPU is lost ({lost[0]})"
            s.utilization = s.memory_util = s.temperature = s.power_draw = s.power_limit = None
            s.memory_total = s.memory_used = s.memory_free = None
            return []
        return [p for p in procs if isinstance(p, dict)]


class HostSampler:
    """All GPUs of this host, one :class:`GPUSample` each per round."""

    def __init__(self, settings: Settings, owners: TrainingOwners | None = None,
                 backend: DeviceBackend | None = None) -> None:
        self.settings = settings
        self.owners = owners
        self.backend = backend or device_backend(settings)
        self.nvml_sampler: NvmlSampler | None = None
        self.others: list[GPUInfo] = []
        self._amd: _AmdSmi | None = None
        self._xpu: Any = None
        try:
            self.nvml_sampler = NvmlSampler(settings, settings, self.backend, owners)
        except Exception as exc:  # noqa: BLE001 - no NVIDIA driver here: sample the other vendors
            log.info("no NVIDIA GPUs to sample (%s)", exc)
        self._find_others()

    def _find_others(self) -> None:
        start = len(self.nvml_sampler.handles) + len(self.nvml_sampler.lost) if self.nvml_sampler else 0
        amdsmi, xpu = self.backend.amdsmi, self.backend.xpusmi
        try:
            self.others = self.backend.detect_other_vendors(start)
        except Exception as exc:  # noqa: BLE001
            log.info("AMD/Intel detection failed: %s", exc)
            self.others = []
        if amdsmi is not None and any(g.vendor == "amd" for g in self.others):
            try:
                self._amd = _AmdSmi(amdsmi)
            except Exception as exc:  # noqa: BLE001 - ROCm without a working amdsmi: memory size only
                log.info("amdsmi unavailable, AMD GPUs report their memory size only: %s", exc)
        if xpu is not None and any(g.vendor == "intel" for g in self.others):
            self._xpu = xpu

    @property
    def disabled_fields(self) -> int:
        return len(self.nvml_sampler.guard.disabled) if self.nvml_sampler else 0

    def sample(self) -> list[GPUSample]:
        # One timestamp per round, whole milliseconds: one row per GPU per interval.
        now = datetime.now(timezone.utc)
        ts = now.replace(microsecond=(now.microsecond // 1000) * 1000)
        out = self.nvml_sampler.sample(ts) if self.nvml_sampler else []
        for info in self.others:
            out.append(self._sample_other(info, ts))
        return out

    def _sample_other(self, info: GPUInfo, ts: datetime) -> GPUSample:
        s = GPUSample(host=self.settings.host_name, index=info.index, timestamp=ts, uuid=info.uuid,
                      name=info.name, vendor=info.vendor, simulated=info.simulated,
                      memory_total=info.memory_total)
        if info.vendor == "amd" and self._amd is not None:
            procs = self._amd.read(info.device_id, s)
            s.processes = self._processes(info.index,
                                          [(int(p["pid"]), _num(p.get("mem")), p.get("name")) for p in procs])
        elif info.vendor == "intel" and self._xpu is not None:
            self._read_xpu(info.device_id, s)
        return s

    def _read_xpu(self, device_id: int, s: GPUSample) -> None:
        try:
            m = stats_with(self._xpu, device_id)
        except XpuSmiError as exc:
            s.lost, s.error, s.memory_total = True, f"xpu-smi: {exc}", None
            return
        s.utilization = m.get("XPUM_STATS_GPU_UTILIZATION")
        s.memory_util = m.get("XPUM_STATS_MEMORY_UTILIZATION")
        s.temperature = m.get("XPUM_STATS_GPU_CORE_TEMPERATURE")
        s.power_draw = m.get("XPUM_STATS_POWER")
        clock = m.get("XPUM_STATS_GPU_FREQUENCY")
        s.sm_clock = int(clock) if clock is not None else None
        used = m.get("XPUM_STATS_MEMORY_USED")
        if used is not None and s.memory_total is not None:
            s.memory_used = int(used * MIB)
            s.memory_free = s.memory_total - s.memory_used

    def _processes(self, index: int, found: list[tuple[int, float | None, Any]]) -> list[GPUProcess]:
        """Processes a vendor library listed on GPU ``index``, with their owners (as the NVML sampler finds them)."""
        out = []
        for pid, mem, name in found:
            user, command, noted_tid = process_user(pid), process_command(pid), None
            note = self.backend.process_note(index, pid)
            if note is not None:
                user, command, noted_tid = user or note.user, command or note.command, note.training_id
            command = command or (name if isinstance(name, str) and name != "N/A" else None)
            tid = self.owners.owner(pid, noted_tid, index, user) if self.owners else None
            out.append(GPUProcess(pid=pid, user=user, command=command,
                                  used_memory=int(mem) if mem is not None else None,
                                  training_id=tid, job_type="training" if tid else None, foreign=tid is None))
        return sorted(out, key=lambda p: p.pid)

    def close(self) -> None:
        if self.nvml_sampler is not None:
            self.nvml_sampler.close()
        if self._amd is not None:
            self._amd.close()
