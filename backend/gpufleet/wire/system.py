"""Schemas of the system resource: hosts, GPUs, topology."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gpufleet.bounds import RequestBody


class HostPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: uuid.UUID
    name: str
    address: str | None
    status: str
    agent_version: str | None
    simulated: bool
    last_heartbeat: datetime | None
    gpu_count: int = 0


class HostsPublic(BaseModel):
    data: list[HostPublic]
    count: int


class GPUProcessPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    pid: int
    user: str | None = None
    command: str | None = None
    used_memory: int | None = None
    training_id: uuid.UUID | None = None
    foreign: bool = True


class GPULive(BaseModel):
    """The newest sample of a GPU (null fields: the device does not report them)."""

    model_config = ConfigDict(from_attributes=True)

    timestamp: datetime | None = None
    utilization: float | None = None
    memory_util: float | None = None
    memory_used: int | None = None
    memory_free: int | None = None
    memory_total: int | None = None
    temperature: float | None = None
    power_draw: float | None = None
    power_limit: float | None = None
    sm_clock: float | None = None
    mem_clock: float | None = None
    lost: bool = False
    processes: list[GPUProcessPublic] = []


class GPUAvailabilityPublic(BaseModel):
    state: str
    reason: str
    free_memory: int | None = None
    holders: list[dict[str, Any]] = []


class GPUPublic(BaseModel):
    id: uuid.UUID
    host: str
    index: int
    uuid: str | None
    vendor: str
    backend: str
    name: str
    pci_bus_id: str | None
    memory_total: int | None
    compute_capability: str | None
    simulated: bool
    status: str
    status_reason: str | None
    drained: bool
    drain_reason: str | None
    live: GPULive | None = None
    availability: GPUAvailabilityPublic | None = None


class GPUsPublic(BaseModel):
    data: list[GPUPublic]
    count: int
    simulated: bool


class LinkPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    gpu_a: int
    gpu_b: int
    nvlink_count: int
    pcie_level: str | None
    peer_access: bool


class HostTopology(BaseModel):
    host: str
    gpus: list[int]
    links: list[LinkPublic]
    # matrix[i][j] in nvidia-smi topo -m notation (X, NV18, PIX, PXB, PHB, NODE, SYS)
    matrix: list[list[str]]


class TopologyPublic(BaseModel):
    hosts: list[HostTopology]


class Health(BaseModel):
    status: str
    version: str
    database: str
    embedded: bool


class DrainRequest(RequestBody):
    reason: str | None = Field(default=None, max_length=500)


class DrainPublic(BaseModel):
    host: str
    index: int
    drained: bool
    reason: str | None
    # Trainings that keep running on the GPU (draining only stops new placements).
    still_running: list[str]


class HealthClearedPublic(BaseModel):
    host: str
    index: int
    status: str = Field(description="the GPU's status now")
    cleared: str | None = Field(description="the health fault the GPU was out for; null when it had no health mark")
