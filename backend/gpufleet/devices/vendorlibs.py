"""Which AMD and Intel management interfaces a process talks to: the real ones or the simulated ones.

Like :func:`~gpufleet.devices.nvml.get_nvml`: on a simulated fleet one
simulated ``amdsmi`` per (spec, state dir, host), so its init count is shared
by everything in the process; otherwise the installed ``amdsmi`` module (None
without ROCm) and the ``xpu-smi`` binary.
"""

from __future__ import annotations

import threading
from typing import Any

from gpufleet.config import Settings

_lock = threading.Lock()
_amdsmi: dict[tuple[str, str, str], Any] = {}


def get_amdsmi(settings: Settings) -> Any:
    """``amdsmi``, a :class:`~gpufleet.devices.simamdsmi.SimAmdSmi`, or None when not installed."""
    if not settings.simulate:
        try:
            import amdsmi  # type: ignore[import-not-found]
        except Exception:  # noqa: BLE001 - not installed, or installed without ROCm's libamd_smi.so
            return None
        return amdsmi
    from gpufleet.devices.simamdsmi import SimAmdSmi

    key = (settings.simulate, str(settings.sim_state_dir), settings.host_name)
    with _lock:
        lib = _amdsmi.get(key)
        if lib is None:
            lib = _amdsmi[key] = SimAmdSmi(settings.simulate, settings.sim_state_dir, settings.host_name)
        return lib


def get_xpusmi(settings: Settings) -> Any:
    """The ``xpu-smi`` runner: the binary, or the simulated one on a simulated fleet."""
    if settings.simulate:
        from gpufleet.devices.simxpusmi import SimXpuSmi

        return SimXpuSmi(settings.simulate, settings.sim_state_dir, settings.host_name)
    from gpufleet.devices.xpusmi import XpuSmi

    return XpuSmi()
