"""The simulated NVML's health and accounting readings, mixed into ``SimNVML``, and their faults.

What dcgm-exporter's default counters read through NVML beyond the live
readings (``simmetrics``): total energy since the driver loaded (power
integrated over time, from a boot figure of a few kWh), PCIe replays, encoder
and decoder utilisation (0 on a training GPU, with NVML's sampling period),
remapped rows, memory temperature (a few degrees above the GPU's, as HBM
runs). Faults are set in the shared state (:func:`set_row_remaps`,
:func:`set_pcie_replays`; ECC counts and XIDs in ``simstate``), so every
process of the simulated host sees them, as every process sees a real GPU's.
"""

from __future__ import annotations

import time
from typing import Any

import pynvml

import gpufleet.devices.simstate as simstate
from gpufleet.devices.simmetrics import noise, read_gpu

BOOT_ENERGY_MJ = 3_600_000_000  # 1 kWh, what a GPU has used since the driver loaded, before this process
MEMORY_TEMP_ABOVE_GPU_C = 4
CODEC_SAMPLING_US = 167_000


def set_row_remaps(target: simstate.StateTarget, gpu_index: int, correctable: int = 0, uncorrectable: int = 0,
                   pending: bool = False, failure: bool = False) -> None:
    """What ``nvmlDeviceGetRemappedRows`` answers for the GPU: (correctable, uncorrectable, pending, failure)."""
    simstate.check_gpu(gpu_index)
    if correctable < 0 or uncorrectable < 0:
        raise ValueError("remapped row counts must be >= 0")
    with simstate.mutate(target) as state:
        state.ecc.setdefault(gpu_index, {}).update(
            remap_corrected=int(correctable), remap_uncorrected=int(uncorrectable),
            remap_pending=int(bool(pending)), remap_failure=int(bool(failure)))


def set_pcie_replays(target: simstate.StateTarget, gpu_index: int, replays: int) -> None:
    simstate.check_gpu(gpu_index)
    if replays < 0:
        raise ValueError("the PCIe replay count must be >= 0")
    with simstate.mutate(target) as state:
        state.ecc.setdefault(gpu_index, {})["pcie_replay"] = int(replays)


class SimHealthMixin:
    """Needs ``_dev``, ``_reading``, ``_lock`` of ``SimNVML``."""

    _dev: Any
    _reading: Any
    _lock: Any

    def _counts(self, handle: Any, what: str) -> dict[str, int]:
        gpu, state = self._dev(handle, what)
        return state.ecc.get(gpu.index, {})

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int:
        """Millijoules since the driver loaded: a boot figure, then this GPU's power over time."""
        gpu, state = self._dev(handle, "energy")
        power = read_gpu(gpu, simstate.live_processes(state, gpu.index), idle=gpu.index in state.idle).power_mw
        energy = self.__dict__.setdefault("_energy", {})
        with self._lock:
            now = time.monotonic()
            last, mj = energy.get(gpu.index, (now, BOOT_ENERGY_MJ + noise(gpu.index, "boot", 10**9, 0)))
            mj += int(power * max(0.0, now - last))  # mW x s = mJ
            energy[gpu.index] = (now, mj)
        return mj

    def nvmlDeviceGetPcieReplayCounter(self, handle: Any) -> int:
        return int(self._counts(handle, "pcie_replay").get("pcie_replay", 0))

    def nvmlDeviceGetEncoderUtilization(self, handle: Any) -> list[int]:
        self._dev(handle, "encoder")
        return [0, CODEC_SAMPLING_US]

    def nvmlDeviceGetDecoderUtilization(self, handle: Any) -> list[int]:
        self._dev(handle, "decoder")
        return [0, CODEC_SAMPLING_US]

    def nvmlDeviceGetRemappedRows(self, device: Any) -> tuple[int, int, int, int]:
        gpu, state = self._dev(device, "remapped_rows")
        if not gpu.spec.ecc:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        c = state.ecc.get(gpu.index, {})
        return (int(c.get("remap_corrected", 0)), int(c.get("remap_uncorrected", 0)),
                int(c.get("remap_pending", 0)), int(c.get("remap_failure", 0)))

    def _memory_temp(self, handle: Any) -> int:
        return self._reading(handle, "memory_temperature").temperature + MEMORY_TEMP_ABOVE_GPU_C
