"""What a simulated GPU reads right now, from the processes on it.

Idle with no process; busy when any process is on it: memory used is their
sum plus a small baseline, utilization is high with a little noise, and
temperature, power and clocks follow utilization. The noise is a hash of the
GPU and the current second, so it is deterministic for a given time (tests can
bound it) and still moves from sample to sample like a real GPU.
"""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass

from gpufleet.devices.simspecs import SimGPU
from gpufleet.devices.simstate import SimProcess

# What the driver itself holds on an idle GPU.
BASELINE_USED = 4 * 1024**2
IDLE_TEMPERATURE_C = 32
BUSY_UTILIZATION = 88  # percent, before noise
IDLE_POWER_FRACTION = 0.1
# The name of a gpufleet process that holds its GPUs and runs no kernels (a session's shell or notebook):
# its GPU reads idle until something else runs on it.
IDLE_HOLDER = "gpufleet-session"


@dataclass(frozen=True)
class SimReading:
    memory_total: int
    memory_used: int
    memory_free: int
    utilization: int  # percent
    memory_utilization: int  # percent of memory bandwidth
    temperature: int  # °C
    power_mw: int
    power_limit_mw: int
    sm_clock_mhz: int
    mem_clock_mhz: int
    pcie_tx_kbs: int
    pcie_rx_kbs: int


def noise(gpu_index: int, salt: str, span: int, now: float | None = None) -> int:
    """An integer in ``[0, span)`` fixed for one GPU, purpose and second."""
    second = int(time.time() if now is None else now)
    return zlib.crc32(f"{gpu_index}:{salt}:{second}".encode()) % max(span, 1)


def read_gpu(gpu: SimGPU, procs: list[SimProcess], now: float | None = None, *, idle: bool = False) -> SimReading:
    """``idle``: its processes hold memory but run nothing (simstate.set_idle)."""
    spec = gpu.spec
    total = gpu.memory_total
    used = min(total, BASELINE_USED + sum(p.used_memory for p in procs))
    limit_mw = spec.power_limit_w * 1000
    idle_mw = int(limit_mw * IDLE_POWER_FRACTION)
    working = [p for p in procs if p.name != IDLE_HOLDER]  # a session's process alone runs nothing
    if working and not idle:
        util = min(100, BUSY_UTILIZATION - 4 + noise(gpu.index, "util", 13, now))
        mem_util = 35 + noise(gpu.index, "mem", 20, now)
        sm_clock = spec.sm_clock_max_mhz - noise(gpu.index, "clk", 4, now) * 15
        pcie = 150_000 + noise(gpu.index, "pcie", 50_000, now)
    else:
        util, mem_util, sm_clock = 0, 0, spec.sm_clock_idle_mhz
        pcie = noise(gpu.index, "pcie", 200, now)
    return SimReading(
        memory_total=total,
        memory_used=used,
        memory_free=total - used,
        utilization=util,
        memory_utilization=mem_util,
        temperature=IDLE_TEMPERATURE_C + (util * 45) // 100,
        power_mw=idle_mw + int((limit_mw - idle_mw) * 0.9 * util / 100),
        power_limit_mw=limit_mw,
        sm_clock_mhz=sm_clock,
        mem_clock_mhz=spec.mem_clock_mhz,
        pcie_tx_kbs=pcie,
        pcie_rx_kbs=pcie // 2,
    )
