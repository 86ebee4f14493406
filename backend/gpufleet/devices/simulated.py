"""The device backend of a simulated fleet (``GPUFLEET_SIMULATE``).

Its vendor libraries imitate the real ones (:mod:`~gpufleet.devices.simnvml`,
:mod:`~gpufleet.devices.simamdsmi`, :mod:`~gpufleet.devices.simxpusmi`), and
its changing state (processes, faults) lives in :mod:`~gpufleet.devices.simstate`,
shared by every process on the host. Simulated GPUs run no kernels, so the
ranks of a training run on the CPU in their place, and the training's
processes are recorded in the state so that the simulated drivers list them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import gpufleet.devices.simmetrics as simmetrics
import gpufleet.devices.simstate as simstate
from gpufleet.devices.detect import detect_amd_with, detect_nvidia
from gpufleet.devices.simamdsmi import SimAmdSmi
from gpufleet.devices.simnvml import SimNVML
from gpufleet.devices.simspecs import pcie_level
from gpufleet.devices.simxpusmi import SimXpuSmi
from gpufleet.devices.topology import Topology, build_topology, nvml_links
from gpufleet.devices.types import GPUInfo, ProcessNote
from gpufleet.devices.xpusmi import detect_with

log = logging.getLogger(__name__)

# What a rank of a training without a memory estimate shows on its GPU.
RANK_MEMORY = 512 * 2**20


class SimulatedBackend:
    """The GPUs of one simulated fleet: (spec, topology, state dir, host)."""

    simulated = True

    def __init__(self, spec: str, topology: str, state_dir: Path, host_name: str = "localhost",
                 context_bytes: int = 963 * 2**20) -> None:
        self.spec, self.topology = spec, topology
        # The context each rank's process holds (GPUFLEET_SIM_CONTEXT_MB); see devices/simmemory.py.
        self.context = context_bytes
        self.state_dir = Path(state_dir)
        self.nvml = SimNVML(spec, topology, state_dir, host_name)
        self.amdsmi = SimAmdSmi(spec, state_dir, host_name)
        self.xpusmi = SimXpuSmi(spec, state_dir, host_name)

    def __repr__(self) -> str:
        return f"<simulated GPUs {self.spec} {self.topology}>"

    @property
    def description(self) -> str:
        return f"simulated: {self.spec}, {self.topology}"

    def detect_gpus(self) -> list[GPUInfo]:
        gpus = detect_nvidia(self.nvml, simulated=True)
        return gpus + self.detect_other_vendors(len(gpus))

    def detect_other_vendors(self, start_index: int) -> list[GPUInfo]:
        amd = detect_amd_with(self.amdsmi, start_index, simulated=True) or []
        return amd + detect_with(self.xpusmi, start_index + len(amd), simulated=True)

    def detect_topology(self, gpus: list[GPUInfo]) -> Topology:
        # NVML describes only the NVIDIA pairs; the simulated layout knows every pair's PCIe level.
        return build_topology(gpus, nvml_links(self.nvml, gpus), lambda a, b: pcie_level(self.topology, a, b))

    def process_note(self, gpu_index: int, pid: int) -> ProcessNote | None:
        p = next((p for p in simstate.live_processes(self.state_dir, gpu_index) if p.pid == pid), None)
        return None if p is None else ProcessNote(user=p.user, command=p.name, training_id=p.training_id)

    def ranks_run_on_cpu(self, devices: Sequence[str]) -> bool:
        return any(d != "cpu" for d in devices)

    def training_started(self, gpu_indexes: Sequence[int], pid: int, training_id: str,
                         memory_estimate: int | None, *, busy: bool = True) -> None:
        # A session's process holds its GPUs and runs nothing on them: an idle GPU, as a real one reads.
        name = "gpufleet-train" if busy else simmetrics.IDLE_HOLDER
        try:
            # Rank r runs on gpu_indexes[r]; what it holds is modeled (context + its reserved memory).
            for rank, index in enumerate(gpu_indexes):
                simstate.register_process(self.state_dir, index, pid, memory_estimate or RANK_MEMORY, name,
                                          training_id=training_id, context=self.context, rank=rank)
        except Exception:  # telemetry of a simulated GPU must not stop a training
            log.exception("could not register training %s in the simulated fleet", training_id)

    def context_bytes(self, gpus: Sequence[GPUInfo]) -> dict[int, int]:
        return {g.index: self.context for g in gpus}

    def training_ended(self, pid: int) -> None:
        try:
            simstate.unregister_process(self.state_dir, None, pid)
        except Exception:
            log.exception("could not unregister process %s from the simulated fleet", pid)
