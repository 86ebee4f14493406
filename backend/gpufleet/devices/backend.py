"""One interface to this host's GPUs, whether they are real or simulated.

Everything outside ``devices/`` reaches hardware through a
:class:`DeviceBackend`, chosen once per fleet description by
:func:`device_backend`:

- :class:`~gpufleet.devices.native.NativeBackend`: the drivers of this
  machine (``pynvml``, ``amdsmi``, ``xpu-smi``);
- :class:`~gpufleet.devices.simulated.SimulatedBackend`: the fleet that
  ``GPUFLEET_SIMULATE`` describes.

The vendor libraries a backend hands out keep the vendors' own APIs (the
simulated NVML has ``pynvml``'s functions, constants and errors), so the code
that reads GPUs runs the same path on both. What differs between a real and a
simulated fleet lives in the two implementations, never in a caller.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Protocol

from gpufleet.config import Settings
from gpufleet.devices.topology import Topology
from gpufleet.devices.types import GPUInfo, ProcessNote
from gpufleet.devices.xpusmi import XpuSmiRunner


class DeviceBackend(Protocol):
    """What jobs, telemetry and the commands need from the GPUs of this host."""

    # Shown with the host and its GPUs (``hosts.simulated``, ``GPUSample.simulated``).
    simulated: bool

    @property
    def nvml(self) -> Any:
        """``pynvml``, or an object with its functions, constants and ``NVMLError`` classes."""

    @property
    def amdsmi(self) -> Any | None:
        """``amdsmi`` (or an imitation of it); None where it is not installed."""

    @property
    def xpusmi(self) -> XpuSmiRunner | None:
        """The ``xpu-smi`` runner; None where the binary is not installed."""

    @property
    def description(self) -> str | None:
        """What a listing of these GPUs should add about their origin (None for real hardware)."""

    def detect_gpus(self) -> list[GPUInfo]:
        """Every GPU, by fleet index: NVIDIA (NVML order), then AMD, then Intel. Never raises."""

    def detect_other_vendors(self, start_index: int) -> list[GPUInfo]:
        """The AMD and Intel GPUs, numbered from ``start_index``."""

    def detect_topology(self, gpus: list[GPUInfo]) -> Topology:
        """The links between ``gpus`` (as :meth:`detect_gpus` returned them)."""

    def process_note(self, gpu_index: int, pid: int) -> ProcessNote | None:
        """What the backend knows of ``pid`` on GPU ``gpu_index`` that ``/proc`` may not say; None when nothing."""

    def ranks_run_on_cpu(self, devices: Sequence[str]) -> bool:
        """True when ranks given these devices must run on the CPU in their place."""

    def training_started(self, gpu_indexes: Sequence[int], pid: int, training_id: str,
                         memory_estimate: int | None, *, busy: bool = True) -> None:
        """A training's launcher ``pid`` now runs on these GPUs. Never raises. ``busy=False``: it holds them
        without running kernels until its owner does (a session's shell or notebook)."""

    def training_ended(self, pid: int) -> None:
        """The launcher ``pid`` has exited. Never raises."""

    def context_bytes(self, gpus: Sequence[GPUInfo]) -> dict[int, int]:
        """The device memory a process holds on each of ``gpus`` before its first tensor (the
        CUDA context), measured on this host by a short probe; GPUs it cannot measure are left out."""


_lock = threading.Lock()
_backends: dict[tuple[str, ...], DeviceBackend] = {}


def device_backend(settings: Settings) -> DeviceBackend:
    """The backend for the fleet ``settings`` describe: one object per fleet in a process.

    Like the real ``pynvml`` module, a simulated NVML's ``nvmlInit`` count is
    then shared by everything in the process that reads the same fleet.
    """
    if not settings.simulate:
        key: tuple[str, ...] = ("native",)
    else:
        key = (settings.simulate, settings.simulate_topology, str(settings.sim_state_dir), settings.host_name)
    with _lock:
        backend = _backends.get(key)
        if backend is None:
            backend = _backends[key] = _build(settings)
        return backend


def _build(settings: Settings) -> DeviceBackend:
    if not settings.simulate:
        from gpufleet.devices.native import NativeBackend

        return NativeBackend()
    from gpufleet.devices.simulated import SimulatedBackend

    return SimulatedBackend(settings.simulate, settings.simulate_topology, settings.sim_state_dir,
                            settings.host_name, context_bytes=settings.sim_context_mb * 2**20)


def detect_gpus(settings: Settings) -> list[GPUInfo]:
    """Every GPU of this machine (or of the simulated fleet), by fleet index."""
    return device_backend(settings).detect_gpus()


def detect_topology(settings: Settings, gpus: list[GPUInfo]) -> Topology:
    """The links between ``gpus`` (as :func:`detect_gpus` returned them)."""
    return device_backend(settings).detect_topology(gpus)
