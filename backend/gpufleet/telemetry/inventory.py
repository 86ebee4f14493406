"""The agent's inventory: this host, its GPUs and their links, in the database.

Writes take the SQLite write lock up front (``write_session``): the agent
writes history on the same file and a read-then-write transaction would
otherwise fail at once with "database is locked".

On start the agent registers (or updates) its host row, one row per GPU and
one per GPU pair; then it heartbeats. A GPU that is no longer detected is
marked ``missing``, never deleted: reservations, history and trainings keep
pointing at it, and it comes back as ``ok`` when it reappears.
"""

from __future__ import annotations

import logging
import socket
import uuid
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet import __version__
from gpufleet.config import HostSettings, Settings, StoreSettings
from gpufleet.db.models import GPU, GPULink, Host
from gpufleet.db.session import write_session
from gpufleet.db.types import utcnow
from gpufleet.devices.backend import device_backend
from gpufleet.telemetry.gpu_health import held

log = logging.getLogger(__name__)

# How often a host says it is alive (the agent, or a worker running without one).
HEARTBEAT_S = 10.0


@dataclass(frozen=True)
class Inventory:
    host_id: uuid.UUID
    host_name: str
    gpu_count: int
    missing: tuple[int, ...]


def _address() -> str | None:
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return None


def register_host(settings: Settings) -> Inventory:
    """Detect this machine's GPUs and topology and write them to the database."""
    backend = device_backend(settings)
    gpus = backend.detect_gpus()
    topology = backend.detect_topology(gpus)
    contexts = backend.context_bytes(gpus)  # a short probe per GPU model, before the write lock
    now = utcnow()
    with write_session(settings) as sess:
        host = sess.scalar(select(Host).where(Host.name == settings.host_name))
        if host is None:
            host = Host(name=settings.host_name)
            sess.add(host)
        host.address = _address()
        host.status = "online"
        host.agent_version = __version__
        host.simulated = backend.simulated
        host.last_heartbeat = now
        sess.flush()

        rows = {g.index: g for g in sess.scalars(select(GPU).where(GPU.host_id == host.id))}
        seen: set[int] = set()
        for info in gpus:
            seen.add(info.index)
            row = rows.get(info.index)
            if row is None:
                row = GPU(host_id=host.id, index=info.index)
                sess.add(row)
            row.uuid = info.uuid
            row.vendor = info.vendor
            row.backend = info.backend
            row.backend_device_id = info.device_id
            row.name = info.name or "unknown"
            row.pci_bus_id = info.pci_bus_id
            if info.memory_total is not None:
                row.memory_total = info.memory_total
            row.compute_capability = info.compute_capability
            row.simulated = info.simulated
            row.context_bytes = contexts.get(info.index, row.context_bytes)
            if not (info.healthy and held(row.status, row.status_reason)):  # a health mark outlives a restart
                row.status = "ok" if info.healthy else "unhealthy"
                row.status_reason = None if info.healthy else (info.error or "the driver reports an error")
            row.last_seen = now
        missing = sorted(set(rows) - seen)
        for idx in missing:
            row = rows[idx]
            if row.status != "missing":
                log.warning("GPU %d of host %s is no longer detected; marked missing", idx, host.name)
            row.status = "missing"
            row.status_reason = "not detected at the last agent start"
        _write_links(sess, host.id, topology)
        inv = Inventory(host.id, host.name, len(gpus), tuple(missing))
    return inv


def _write_links(sess: Session, host_id: uuid.UUID, topology) -> None:
    existing = {(l.gpu_a, l.gpu_b): l for l in sess.scalars(select(GPULink).where(GPULink.host_id == host_id))}
    for (a, b), link in topology.links.items():
        if a >= b:
            continue
        row = existing.pop((a, b), None)
        if row is None:
            row = GPULink(host_id=host_id, gpu_a=a, gpu_b=b)
            sess.add(row)
        row.nvlink_count = link.nvlink_count
        row.pcie_level = link.pcie_level
        row.peer_access = link.peer_access
    for stale in existing.values():
        sess.delete(stale)


def heartbeat(store_settings: StoreSettings, host_settings: HostSettings) -> None:
    """Mark this host alive now."""
    with write_session(store_settings) as sess:
        host = sess.scalar(select(Host).where(Host.name == host_settings.host_name))
        if host is not None:
            host.last_heartbeat = utcnow()
            host.status = "online"
