"""Section ``host``: this machine in the fleet — its name, its address, and its GPUs (real or simulated)."""

from __future__ import annotations

import re
import socket
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class NVLinkConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    topology: Literal["auto", "ring", "mesh", "custom"] = "auto"
    bandwidth_test: bool = False


class GPUConfig(BaseModel):
    """The seed's ``gpu:`` block."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["auto", "single", "nvlink", "cpu"] = "auto"
    devices: list[int] | None = None
    max_models_per_gpu: int = Field(default=4, ge=1, le=64)
    allow_peer_access: bool = True
    nvlink: NVLinkConfig = Field(default_factory=NVLinkConfig)

    @field_validator("devices")
    @classmethod
    def _unique_devices(cls, v: list[int] | None) -> list[int] | None:
        if v is None:
            return v
        if any(i < 0 for i in v):
            raise ValueError("device indexes must be >= 0")
        if len(set(v)) != len(v):
            raise ValueError(f"device indexes must be unique, got {v}")
        return v


_SIM_PART = re.compile(r"^(\d+)x([A-Za-z0-9]+?)(?:-(\d+)GB)?$")


def parse_simulate_spec(spec: str) -> list[tuple[int, str, int | None]]:
    """Parse ``4xH100-80GB`` or ``2xRTX3090-24GB+1xA770-16GB``.

    Returns ``[(count, model, memory_gb or None), ...]``. Raises ``ValueError``
    with a message that shows the expected form.
    """
    parts = [p.strip() for p in spec.split("+") if p.strip()]
    if not parts:
        raise ValueError("empty spec; expected e.g. 4xH100-80GB or 2xRTX3090-24GB+1xA770-16GB")
    out: list[tuple[int, str, int | None]] = []
    for part in parts:
        m = _SIM_PART.match(part)
        if not m:
            raise ValueError(
                f"cannot read {part!r}; expected COUNTxMODEL[-MEMGB], e.g. 4xH100-80GB"
            )
        count = int(m.group(1))
        if not 1 <= count <= 64:
            raise ValueError(f"{part!r}: count must be between 1 and 64")
        mem = int(m.group(3)) if m.group(3) else None
        if mem is not None and not 1 <= mem <= 1024:
            raise ValueError(f"{part!r}: memory must be between 1 and 1024 GB")
        out.append((count, m.group(2), mem))
    return out


class HostSettings(BaseModel):
    # This machine's name in the fleet (the Celery queue it consumes is named after it).
    host_name: str = Field(default_factory=socket.gethostname)
    # Trainings across hosts: the address other hosts reach this one at, and the NIC for collectives.
    advertise_address: str | None = None
    network_interface: str | None = None

    # GPUs: a simulated fleet instead of NVML, its links, and the CUDA context a simulated GPU's process
    # holds (as measured on an H100, driver 580, torch 2.11).
    simulate: str | None = None
    simulate_topology: Literal["nvlink-all", "nvlink-pairs", "pcie"] = "nvlink-all"
    sim_context_mb: int = Field(default=963, ge=0, le=65536)
    gpu: GPUConfig = Field(default_factory=GPUConfig)

    @field_validator("simulate")
    @classmethod
    def _check_simulate(cls, v: str | None) -> str | None:
        if v is None or v.strip() == "" or v.strip().lower() in {"0", "off", "false", "no"}:
            return None
        parse_simulate_spec(v)
        return v.strip()
