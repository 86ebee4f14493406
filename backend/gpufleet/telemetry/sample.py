"""What one sample of one GPU holds: the shape every telemetry consumer reads.

Units are fixed here once so that nobody has to guess them downstream:
memory in bytes, power in watts, temperature in degrees Celsius, clocks in
MHz, utilization in percent (0-100), PCIe and NVLink throughput in bytes per
second. A field the GPU cannot report (or refused once) is ``None``.
"""

from __future__ import annotations

import uuid
from uuid import UUID
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from typing import Any


@dataclass
class GPUProcess:
    """A process holding memory on a GPU.

    ``training_id`` names the gpufleet training that owns the process (its
    launcher or one of its ranks); ``foreign`` is true for every process that
    no training owns, which GPU selection treats as "someone else is here".
    """

    pid: int
    user: str | None = None
    command: str | None = None
    used_memory: int | None = None
    training_id: uuid.UUID | None = None
    job_type: str | None = None
    foreign: bool = True

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["training_id"] = str(self.training_id) if self.training_id else None
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GPUProcess:
        tid = d.get("training_id")
        return cls(
            pid=int(d["pid"]),
            user=d.get("user"),
            command=d.get("command"),
            used_memory=d.get("used_memory"),
            training_id=uuid.UUID(tid) if tid else None,
            job_type=d.get("job_type"),
            foreign=bool(d.get("foreign", True)),
        )


@dataclass
class GPUSample:
    host: str
    index: int
    timestamp: datetime
    uuid: str | None = None
    name: str | None = None
    vendor: str | None = None
    utilization: float | None = None
    memory_util: float | None = None
    memory_used: int | None = None
    memory_total: int | None = None
    memory_free: int | None = None
    # Held by the driver and firmware, never available to processes (NVML's v2 memory info).
    memory_reserved: int | None = None
    temperature: float | None = None
    power_draw: float | None = None
    power_limit: float | None = None
    sm_clock: int | None = None
    mem_clock: int | None = None
    # Slow cadence: the newest value is repeated until the next slow read.
    pcie_tx: int | None = None
    pcie_rx: int | None = None
    nvlink_tx: int | None = None
    nvlink_rx: int | None = None
    ecc_errors: int | None = None
    xid_errors: int | None = None
    # dcgm-exporter's default counters, in its units (slow cadence but the XID).
    last_xid: int | None = None  # the value of the newest XID since the agent started
    fatal_xid_count: int | None = None  # XIDs of the fatal kinds since the agent started (gpu_health.py)
    last_fatal_xid: int | None = None
    memory_temperature: float | None = None
    energy_mj: int | None = None  # since the driver loaded
    pcie_replays: int | None = None
    encoder_util: float | None = None
    decoder_util: float | None = None
    nvlink_total_kib: int | None = None  # NVLink data sent and received, every link, since the driver loaded
    rows_remapped_correctable: int | None = None
    rows_remapped_uncorrectable: int | None = None
    row_remap_pending: bool | None = None
    row_remap_failure: bool | None = None
    driver_version: str | None = None  # the host's GPU driver, as its vendor library reports it
    # The GPU stopped answering (fell off the bus); every metric is None.
    lost: bool = False
    error: str | None = None
    simulated: bool = False
    processes: list[GPUProcess] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, int]:
        return (self.host, self.index)

    @property
    def job_id(self) -> UUID | None:  # the field ``uuid`` hides the module in this class
        """The training that holds this GPU (the seed's ``job_id``), if any."""
        for p in self.processes:
            if p.training_id is not None:
                return p.training_id
        return None

    @property
    def job_type(self) -> str | None:
        for p in self.processes:
            if p.training_id is not None:
                return p.job_type or "training"
        return None

    @property
    def foreign_processes(self) -> list[GPUProcess]:
        return [p for p in self.processes if p.foreign]

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {}
        for f in fields(self):
            d[f.name] = getattr(self, f.name)
        d["timestamp"] = self.timestamp.isoformat()
        d["processes"] = [p.to_dict() for p in self.processes]
        d["job_id"] = str(self.job_id) if self.job_id else None
        d["job_type"] = self.job_type
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GPUSample:
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        kw["timestamp"] = datetime.fromisoformat(d["timestamp"])
        kw["processes"] = [GPUProcess.from_dict(p) for p in d.get("processes") or []]
        return cls(**kw)
