"""Simulated AMD and Intel GPUs, which no NVML can list.

A spec such as ``2xRTX3090-24GB+1xA770-16GB`` holds GPUs that a real host
would report through ROCm or XPU, not NVML. The simulated NVML therefore shows
only the NVIDIA ones, and detection asks this module for the rest: it builds
their :class:`GPUInfo` straight from the simulated fleet and its shared state,
so they get the same treatment as NVIDIA GPUs (processes use their memory, a
refused ``name``/``uuid``/``pci``/``memory`` field is ``None``, ``lose_gpu``
makes them unhealthy).

:func:`read_simulated_gpu` gives the live reading of any simulated GPU, for
samplers that need AMD/Intel metrics without NVML.
"""

from __future__ import annotations

from gpufleet.config import Settings
from gpufleet.devices import simspecs, simstate
from gpufleet.devices.simmetrics import SimReading, read_gpu
from gpufleet.devices.types import GPUInfo


def _fleet(settings: Settings) -> tuple[simspecs.SimGPU, ...]:
    if not settings.simulate:
        return ()
    return simspecs.build_fleet(settings.simulate, settings.host_name)


def detect_simulated_others(settings: Settings, start_index: int = 0) -> list[GPUInfo]:
    """The simulated fleet's AMD and Intel GPUs (those at or after ``start_index``)."""
    state = simstate.read_state(settings)
    out: list[GPUInfo] = []
    for g in _fleet(settings):
        if g.vendor == "nvidia" or g.index < start_index:
            continue
        refused = state.refused.get(g.index, {})
        lost = g.index in state.lost
        reading = read_gpu(g, simstate.live_processes(state, g.index))
        show_mem = not lost and "memory" not in refused
        out.append(
            GPUInfo(
                index=g.index,
                backend=g.backend,  # type: ignore[arg-type]
                device_id=g.device_id,
                vendor=g.vendor,  # type: ignore[arg-type]
                name=None if lost or "name" in refused else g.name,
                uuid=None if lost or "uuid" in refused else g.uuid,
                pci_bus_id=None if lost or "pci" in refused else g.pci_bus_id,
                memory_total=reading.memory_total if show_mem else None,
                memory_free=reading.memory_free if show_mem else None,
                compute_capability=None,
                simulated=True,
                healthy=not lost,
                error="GPU is lost" if lost else None,
            )
        )
    return out


def read_simulated_gpu(settings: Settings, index: int) -> SimReading | None:
    """Live reading of simulated GPU ``index``; None if absent or lost."""
    fleet = _fleet(settings)
    if not 0 <= index < len(fleet):
        return None
    state = simstate.read_state(settings)
    if index in state.lost:
        return None
    return read_gpu(fleet[index], simstate.live_processes(state, index))
