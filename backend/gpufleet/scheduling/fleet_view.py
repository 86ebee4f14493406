"""The fleet as the system routes show it: GPUs with their host, hosts with their GPU count, each
host's link matrix, and whether the database answers. Reads only; the routes shape the answers."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from gpufleet.db.models import GPU, GPULink, Host


def gpus(sess: Session, host: str | None = None) -> list[tuple[GPU, str]]:
    """Every GPU with its host's name (only ``host``'s when given), by host then index."""
    stmt = select(GPU, Host.name).join(Host, GPU.host_id == Host.id).order_by(Host.name, GPU.index)
    if host is not None:
        stmt = stmt.where(Host.name == host)
    return [(g, name) for g, name in sess.execute(stmt).all()]


def hosts(sess: Session) -> list[tuple[Host, int]]:
    """Every host, by name, with how many GPUs it registered."""
    counts = dict(sess.execute(select(GPU.host_id, func.count()).group_by(GPU.host_id)).all())
    return [(h, counts.get(h.id, 0)) for h in sess.scalars(select(Host).order_by(Host.name))]


@dataclass
class HostLinks:
    host: Host
    gpus: list[int] = field(default_factory=list)  # the host's GPU indexes, in order
    links: dict[tuple[int, int], GPULink] = field(default_factory=dict)  # (lower index, higher index) -> link


def topology(sess: Session, host: str | None = None) -> list[HostLinks]:
    """Each host's GPUs and the links between them (only ``host``'s when given)."""
    hosts_q = select(Host).order_by(Host.name)
    if host is not None:
        hosts_q = hosts_q.where(Host.name == host)
    gpus_by_host: dict = defaultdict(list)
    for g in sess.scalars(select(GPU).order_by(GPU.index)):
        gpus_by_host[g.host_id].append(g.index)
    links_by_host: dict = defaultdict(dict)
    for link in sess.scalars(select(GPULink)):
        links_by_host[link.host_id][(link.gpu_a, link.gpu_b)] = link
    return [HostLinks(h, gpus_by_host.get(h.id, []), links_by_host.get(h.id, {})) for h in sess.scalars(hosts_q)]


def database_answers(sess: Session) -> bool:
    try:
        sess.execute(text("SELECT 1"))
        return True
    except Exception:  # noqa: BLE001 - any driver error means the database is unreachable
        return False
