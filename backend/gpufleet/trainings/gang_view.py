"""What a reader sees of a training across hosts: each host, its ranks, its GPUs, its worker."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.lifecycle.models import GangMember


def host_parts(members: list[GangMember]) -> list[dict[str, Any]]:
    return [{"host": m.host_name, "node_rank": m.node_rank,
             "ranks": list(range(m.first_rank, m.first_rank + len(m.gpu_ids))), "gpu_ids": list(m.gpu_ids),
             "status": m.status, "attempt": m.attempt, "heartbeat_at": m.heartbeat_at, "message": m.message}
            for m in sorted(members, key=lambda m: m.node_rank)]


def rank_hosts(members: list[GangMember]) -> list[str]:
    """The host of each global rank, rank 0 first."""
    out: list[str] = []
    for m in sorted(members, key=lambda m: m.first_rank):
        out.extend([m.host_name] * len(m.gpu_ids))
    return out


def add_hosts(sess: Session, views: list[Any]) -> None:
    """Fill ``hosts`` of the views whose training spans hosts (one query for the page)."""
    ids = [v.training.id for v in views if v.training.gang is not None]
    if not ids:
        return
    by: dict[Any, list[GangMember]] = {}
    for m in sess.execute(select(GangMember).where(GangMember.training_id.in_(ids))).scalars():
        by.setdefault(m.training_id, []).append(m)
    for v in views:
        if v.training.id in by and len(by[v.training.id]) > 1:
            v.hosts = host_parts(by[v.training.id])
