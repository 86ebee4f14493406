"""Sampling every GPU of this host: NVIDIA through NVML, AMD through amdsmi, the rest as known.

:class:`HostSampler` is what the agent calls once per round. NVIDIA GPUs are
read by :class:`~gpufleet.telemetry.sampler.NvmlSampler`. AMD GPUs report
what ``amdsmi`` gives (utilization, VRAM, temperature, power) and ``None``
for the rest. Intel GPUs report the memory size found at detection and
``None`` otherwise: the only live source is ``torch.xpu``, and the agent runs
inside the API process in the embedded default, which must never import torch.
On a simulated fleet the AMD and Intel GPUs are read from the simulation.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any

from gpufleet.config import Settings
from gpufleet.devices.types import GPUInfo
from gpufleet.telemetry.owners import TrainingOwners
from gpufleet.telemetry.sample import GPUProcess, GPUSample
from gpufleet.telemetry.sampler import NvmlSampler

log = logging.getLogger(__name__)


class _AmdSmi:
    """Live AMD readings; every field that amdsmi refuses is None."""

    def __init__(self) -> None:
        import amdsmi  # type: ignore[import-not-found]

        self.m = amdsmi
        amdsmi.amdsmi_init()
        self.handles = list(amdsmi.amdsmi_get_processor_handles())

    def read(self, device_id: int, s: GPUSample) -> None:
        m = self.m
        if device_id >= len(self.handles):
            s.lost, s.error = True, "amdsmi no longer lists this GPU"
            return
        h = self.handles[device_id]

        def ask(fn: Any, *args: Any) -> Any:
            try:
                return fn(h, *args)
            except Exception:  # noqa: BLE001 - amdsmi raises its own error types per field
                return None

        act = ask(m.amdsmi_get_gpu_activity) or {}
        if isinstance(act.get("gfx_activity"), (int, float)):
            s.utilization = float(act["gfx_activity"])
        if isinstance(act.get("umc_activity"), (int, float)):
            s.memory_util = float(act["umc_activity"])
        vram = ask(m.amdsmi_get_gpu_vram_usage) or {}
        if isinstance(vram.get("vram_total"), int) and isinstance(vram.get("vram_used"), int):
            # amdsmi reports VRAM in MB.
            s.memory_total = vram["vram_total"] * 1024 * 1024
            s.memory_used = vram["vram_used"] * 1024 * 1024
            s.memory_free = s.memory_total - s.memory_used
        temp_type = getattr(getattr(m, "AmdSmiTemperatureType", None), "EDGE", None)
        temp_metric = getattr(getattr(m, "AmdSmiTemperatureMetric", None), "CURRENT", None)
        if temp_type is not None and temp_metric is not None:
            t = ask(m.amdsmi_get_temp_metric, temp_type, temp_metric)
            s.temperature = float(t) if isinstance(t, (int, float)) else None
        power = ask(m.amdsmi_get_power_info) or {}
        for key in ("current_socket_power", "average_socket_power"):
            if isinstance(power.get(key), (int, float)):
                s.power_draw = float(power[key])
                break


class HostSampler:
    """All GPUs of this host, one :class:`GPUSample` each per round."""

    def __init__(self, settings: Settings, owners: TrainingOwners | None = None) -> None:
        self.settings = settings
        self.owners = owners
        self.nvml_sampler: NvmlSampler | None = None
        self.others: list[GPUInfo] = []
        self._amd: _AmdSmi | None = None
        from gpufleet.devices import get_nvml

        nvml = get_nvml(settings)
        try:
            self.nvml_sampler = NvmlSampler(settings, nvml, owners)
        except Exception as exc:  # noqa: BLE001 - no NVIDIA driver here: sample the other vendors
            log.info("no NVIDIA GPUs to sample (%s)", exc)
        self._find_others()

    def _find_others(self) -> None:
        start = len(self.nvml_sampler.handles) + len(self.nvml_sampler.lost) if self.nvml_sampler else 0
        if self.settings.simulate:
            from gpufleet.devices.simdetect import detect_simulated_others

            self.others = detect_simulated_others(self.settings, start)
            return
        from gpufleet.devices.detect import detect_amd, detect_intel

        try:
            amd = detect_amd(start)
            self.others = amd + detect_intel(start + len(amd))
        except Exception as exc:  # noqa: BLE001
            log.info("AMD/Intel detection failed: %s", exc)
            self.others = []
        if any(g.vendor == "amd" for g in self.others):
            try:
                self._amd = _AmdSmi()
            except Exception as exc:  # noqa: BLE001 - ROCm without amdsmi: memory size only
                log.info("amdsmi unavailable, AMD GPUs report their memory size only: %s", exc)

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
        if self.settings.simulate:
            self._sample_simulated(s)
        elif info.vendor == "amd" and self._amd is not None:
            self._amd.read(info.device_id, s)
        return s

    def _sample_simulated(self, s: GPUSample) -> None:
        from gpufleet.devices import simstate
        from gpufleet.devices.simdetect import read_simulated_gpu

        r = read_simulated_gpu(self.settings, s.index)
        if r is None:
            s.lost, s.error, s.memory_total = True, "GPU is lost", None
            return
        s.utilization, s.memory_util = float(r.utilization), float(r.memory_utilization)
        s.memory_total, s.memory_used, s.memory_free = r.memory_total, r.memory_used, r.memory_free
        s.temperature, s.power_draw = float(r.temperature), r.power_mw / 1000.0
        s.power_limit, s.sm_clock, s.mem_clock = r.power_limit_mw / 1000.0, r.sm_clock_mhz, r.mem_clock_mhz
        procs = []
        for p in simstate.live_processes(self.settings, s.index):
            tid = self.owners.owner(p.pid, p.training_id) if self.owners else None
            procs.append(GPUProcess(pid=p.pid, user=p.user, command=p.name, used_memory=p.used_memory,
                                    training_id=tid, job_type="training" if tid else None, foreign=tid is None))
        s.processes = procs

    def close(self) -> None:
        if self.nvml_sampler is not None:
            self.nvml_sampler.close()
