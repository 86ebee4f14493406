"""A simulated ``xpu-smi``: the Intel GPUs of a simulated fleet, as XPU Manager's CLI prints them.

Answers the commands :mod:`gpufleet.devices.xpusmi` runs with the JSON shapes
of ``xpu-smi -j`` (see that module). A refused field is left out of the JSON,
as ``xpu-smi`` leaves out what Level Zero does not support; a lost GPU stays in
``discovery`` but every command on it fails like a device that stopped
answering.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gpufleet.devices.simspecs as simspecs
import gpufleet.devices.simstate as simstate
from gpufleet.devices.simmetrics import read_gpu
from gpufleet.devices.xpusmi import XpuSmiError

# The simulator's refusable fields, by the metric they hide.
_METRIC_FIELD = {
    "XPUM_STATS_GPU_UTILIZATION": "utilization",
    "XPUM_STATS_MEMORY_UTILIZATION": "utilization",
    "XPUM_STATS_POWER": "power",
    "XPUM_STATS_GPU_CORE_TEMPERATURE": "temperature",
    "XPUM_STATS_MEMORY_USED": "memory",
    "XPUM_STATS_GPU_FREQUENCY": "clocks",
}


class SimXpuSmi:
    def __init__(self, spec: str, state_dir: Path, host_name: str = "localhost") -> None:
        self.spec, self.state_dir, self.host_name = spec, Path(state_dir), host_name

    def _intel(self) -> list[simspecs.SimGPU]:
        return [g for g in simspecs.build_fleet(self.spec, self.host_name) if g.vendor == "intel"]

    def run(self, *args: str) -> dict[str, Any]:
        gpus = self._intel()
        state = simstate.read_state(self.state_dir)
        if list(args) == ["discovery"]:
            return {"device_list": [self._entry(g, state.refused.get(g.index, {})) for g in gpus]}
        if len(args) == 3 and args[1] == "-d" and args[0] in ("discovery", "stats"):
            try:
                g = next(g for g in gpus if g.device_id == int(args[2]))
            except (ValueError, StopIteration):
                raise XpuSmiError(f"Error: device {args[2]} not found") from None
            if g.index in state.lost:
                raise XpuSmiError("Error: Level Zero Initialization Error; the device is lost")
            refused = state.refused.get(g.index, {})
            if args[0] == "discovery":
                d = self._entry(g, refused)
                if "memory" not in refused:
                    d["memory_physical_size_byte"] = str(g.memory_total)
                d["max_mem_alloc_size_byte"] = str(g.memory_total // 2)
                d["number_of_tiles"] = 2
                return d
            return {"device_id": g.device_id, "device_level": self._stats(g, state, refused)}
        raise XpuSmiError(f"Error: unsupported command {' '.join(args)}")

    @staticmethod
    def _entry(g: simspecs.SimGPU, refused: dict[str, str]) -> dict[str, Any]:
        d: dict[str, Any] = {
            "device_id": g.device_id,
            "device_type": "GPU",
            "device_name": g.name,
            "pci_device_id": hex(g.spec.pci_device_id >> 16),
            "vendor_name": "Intel(R) Corporation",
            "uuid": g.uuid,
            "pci_bdf_address": g.pci_bus_id[4:].lower(),
        }
        if "name" in refused:
            d["device_name"] = f"Intel(R) Graphics [{d['pci_device_id']}]"
        if "uuid" in refused:
            del d["uuid"]
        if "pci" in refused:
            del d["pci_bdf_address"]
        return d

    @staticmethod
    def _stats(g: simspecs.SimGPU, state: simstate.SimState, refused: dict[str, str]) -> list[dict[str, Any]]:
        r = read_gpu(g, simstate.live_processes(state, g.index), idle=g.index in state.idle)
        values = {
            "XPUM_STATS_GPU_UTILIZATION": float(r.utilization),
            "XPUM_STATS_MEMORY_UTILIZATION": float(r.memory_utilization),
            "XPUM_STATS_POWER": r.power_mw / 1000.0,
            "XPUM_STATS_GPU_CORE_TEMPERATURE": float(r.temperature),
            "XPUM_STATS_MEMORY_USED": r.memory_used / 2**20,
            "XPUM_STATS_GPU_FREQUENCY": float(r.sm_clock_mhz),
        }
        return [{"metrics_type": k, "value": v} for k, v in values.items() if _METRIC_FIELD[k] not in refused]
