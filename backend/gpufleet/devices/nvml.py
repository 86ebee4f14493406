"""Which NVML a process talks to: the real ``pynvml`` or the simulated one."""

from __future__ import annotations

import threading
from typing import Any

from gpufleet.config import Settings

_lock = threading.Lock()
_simulated: dict[tuple[str, str, str, str], Any] = {}


def get_nvml(settings: Settings) -> Any:
    """``pynvml``, or a :class:`~gpufleet.devices.simnvml.SimNVML` when simulating.

    The simulated NVML is one object per (spec, topology, state dir, host), so
    like the real module its ``nvmlInit``/``nvmlShutdown`` count is shared by
    everything in the process that reads the same fleet.
    """
    if not settings.simulate:
        import pynvml

        return pynvml
    from gpufleet.devices.simnvml import SimNVML

    key = (settings.simulate, settings.simulate_topology, str(settings.sim_state_dir), settings.host_name)
    with _lock:
        nvml = _simulated.get(key)
        if nvml is None:
            nvml = _simulated[key] = SimNVML(
                settings.simulate, settings.simulate_topology, settings.sim_state_dir, settings.host_name
            )
        return nvml
