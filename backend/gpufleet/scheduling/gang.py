"""Placing one training on GPUs of several hosts: all of them in one transaction, or none.

A training whose row carries a ``gang`` request (``hosts`` and
``gpus_per_host``, or the hosts' names, or ``spread: auto``) is placed here
instead of on one host. The GPU rows of every candidate host are locked in
host-name order (then index order, as :func:`~gpufleet.scheduling.reservation.lock_host_gpus`
does), which is the order the one-host path takes them in too, so two
schedulers never deadlock. The allocations of every host, the member rows and
the move to ``scheduled`` are one transaction: a gang never holds part of its
GPUs, and the exclusive-holder unique index guards each GPU as it does for any
training. A GPU that a booking keeps from the training (another's, or a
maintenance window, over the time it would run: ``scheduling.bookings``) is
not free for any of its hosts. What a gang waits for is said in words.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from gpufleet.config import TelemetrySettings
from gpufleet.db.models import GangMember, GangRendezvous, GPUAllocation, Host, Training
from gpufleet.db.types import utcnow
from gpufleet.lifecycle.transitions import transition
from gpufleet.scheduling import bookings
from gpufleet.scheduling.inputs import host_offline
from gpufleet.scheduling.reservation import GPUState, lock_host_gpus, reserve


@dataclass
class Part:
    """One host's share of a gang: its GPUs (free now) in the order their ranks take them."""

    host: str
    gpus: list[int]


def plan(free: dict[str, list[int]], world_size: int, request: dict) -> tuple[list[Part] | None, str]:
    """Which hosts and GPUs; or None and why not. ``free`` maps host name -> free GPU indexes.

    Pure: the scheduler calls it under the lock with what the locked rows say.
    """
    names = request.get("host_names")
    per_host = request.get("gpus_per_host")
    n_hosts = request.get("hosts")
    if names:
        if per_host is None:  # admission stores the count with the names; a request without it cannot be placed
            return None, f"names hosts {', '.join(names)} but not how many GPUs on each (gpus_per_host)"
        short = [h for h in names if len(free.get(h, [])) < per_host]
        if short:
            return None, f"needs {len(names)} hosts × {per_host} free GPUs; " + _have(free, names, per_host)
        return [Part(h, sorted(free[h])[:per_host]) for h in names], ""
    if n_hosts and per_host:
        fit = [h for h in sorted(free) if len(free[h]) >= per_host]
        if len(fit) < n_hosts:
            return None, f"needs {n_hosts} hosts × {per_host} free GPUs; " + _have(free, sorted(free), per_host)
        return [Part(h, sorted(free[h])[:per_host]) for h in fit[:n_hosts]], ""
    # spread: auto — the fewest hosts: one when one fits, else the emptiest first.
    one = sorted((len(g), h) for h, g in free.items() if len(g) >= world_size)
    if one:
        h = one[0][1]
        return [Part(h, sorted(free[h])[:world_size])], ""
    parts, left = [], world_size
    for h in sorted(free, key=lambda x: (-len(free[x]), x)):
        if left <= 0:
            break
        take = min(left, len(free[h]))
        if take:
            parts.append(Part(h, sorted(free[h])[:take]))
            left -= take
    if left > 0:
        total = sum(len(g) for g in free.values())
        each = ", ".join(f"{h}: {len(free[h])}" for h in sorted(free)) or "no host online"
        return None, f"needs {world_size} free GPUs on the fewest hosts; the fleet has {total} free ({each})"
    return parts, ""


def _have(free: dict[str, list[int]], names: list[str], per_host: int) -> str:
    words = []
    for h in names:
        if h not in free:
            words.append(f"host {h} is offline")
        elif len(free[h]) < per_host:
            words.append(f"host {h} has {len(free[h])} free")
    ok = [h for h in names if len(free.get(h, [])) >= per_host]
    if ok:
        words.append(f"{', '.join(ok)} ha{'s' if len(ok) == 1 else 've'} enough")
    return "; ".join(words) or "no host online"


def schedule_gang(sess: Session, settings: TelemetrySettings, t: Training, now: datetime | None = None,
                  stop_grace_s: float = 0.0) -> tuple[str | None, str | None, uuid.UUID | None, list[int]]:
    """Place gang training ``t`` (locked, queued) now, or record why it waits; as ``_schedule_one`` answers.
    ``now`` and ``stop_grace_s`` are what the bookings are judged by (``scheduling.bookings.booked_away``)."""
    online = [h for h in sess.execute(select(Host).order_by(Host.name)).scalars()
              if not host_offline(h.status, h.last_heartbeat, settings)]
    wanted = t.gang.get("host_names") if t.gang else None
    if wanted:
        online = [h for h in online if h.name in wanted]
    # A host whose worker was just lost is no candidate until that worker beats again: a member
    # there could never join, and the gang would wait out the rendezvous for nothing.
    hosts = [h for h in online if h.worker_lost_at is None]
    lost = "".join(f"; host {h.name} is left out until its worker beats again ({h.worker_lost_reason or 'lost'})"
                   for h in online if h.worker_lost_at is not None)
    if not wanted:  # named hosts are named by plan(); a host it ran on that went offline is named here
        ran_on = sess.execute(select(GangMember.host_name).where(GangMember.training_id == t.id)).scalars()
        lost += "".join(f"; host {name}, where it ran, is offline" for name in
                        sorted(set(ran_on) - {h.name for h in online}))
    by_name = {h.name: h for h in hosts}
    # Every candidate host's GPU rows, locked in name order, before anything is read.
    states = {h.name: lock_host_gpus(sess, h.id) for h in hosts}
    for h in hosts:
        bookings.mark(states[h.name], bookings.booked_away(sess, t, h.id, now or utcnow(), stop_grace_s))
    free = {name: [s.index for s in st if s.why_not_exclusive() is None] for name, st in states.items()}
    parts, why = plan(free, t.world_size, t.gang or {})
    if parts is None:
        detail = _first_busy(states, free, t.gang or {})
        reason = why + (f" ({detail})" if detail else "") + lost
        if t.wait_reason != reason:
            sess.execute(update(Training).where(Training.id == t.id).values(wait_reason=reason)
                         .execution_options(synchronize_session=False))
        return None, reason, None, []
    sess.execute(delete(GangMember).where(GangMember.training_id == t.id))
    sess.execute(delete(GangRendezvous).where(GangRendezvous.training_id == t.id))
    if len(parts) == 1:
        # spread: auto found one host: an ordinary training there.
        host = by_name[parts[0].host]
        idx = {s.index: s for s in states[host.name]}
        chosen = [idx[i] for i in parts[0].gpus]
        if reserve(sess, t, host, chosen, selection={"chosen": parts[0].gpus, "reason": "one host holds it"}):
            return host.name, None, host.id, parts[0].gpus
        return None, None, None, []
    if reserve_gang(sess, t, parts, by_name, states):
        return parts[0].host, None, by_name[parts[0].host].id, parts[0].gpus
    return None, None, None, []


def _first_busy(states: dict[str, list[GPUState]], free: dict[str, list[int]], request: dict) -> str:
    per_host = request.get("gpus_per_host") or 0
    for name, st in states.items():
        if len(free[name]) < per_host or not per_host:
            why = next((s.why_not_exclusive() for s in st if s.why_not_exclusive()), None)
            if why:
                return f"on {name}: {why}"
    return ""


def reserve_gang(sess: Session, t: Training, parts: list[Part], hosts: dict[str, Host],
                 states: dict[str, list[GPUState]]) -> bool:
    """Allocations on every host, the members and ``scheduled``: one transaction (the caller's)."""
    leader = hosts[parts[0].host]
    where = ", ".join(f"{p.host} GPUs {p.gpus}" for p in parts)
    layout = [{"host": p.host, "gpu_ids": p.gpus} for p in parts]
    moved = transition(
        sess, t.id, ["queued"], "scheduled",
        reason=f"{t.world_size} GPUs on {len(parts)} hosts: {where}",
        data={"host": leader.name, "gpu_ids": parts[0].gpus, "gang": layout},
        host_id=leader.id, gpu_ids=parts[0].gpus, world_size=sum(len(p.gpus) for p in parts), distributed=True,
        scheduled_at=utcnow(), wait_reason=None, cancel_requested=False,
        selection={"chosen": parts[0].gpus, "gang": layout, "by": "gang",
                   "reason": f"fewest hosts: {len(parts)} ({where})"},
    )
    if not moved:
        return False
    first = 0
    for node_rank, part in enumerate(parts):
        host = hosts[part.host]
        by_index = {s.index: s for s in states[part.host]}
        for index in part.gpus:
            sess.add(GPUAllocation(training_id=t.id, gpu_id=by_index[index].gpu.id, host_id=host.id,
                                   gpu_index=index, exclusive=True, reserved_memory=t.memory_estimate,
                                   allocated_at=utcnow()))
        sess.add(GangMember(training_id=t.id, host_id=host.id, host_name=host.name, node_rank=node_rank,
                            first_rank=first, gpu_ids=list(part.gpus), status="reserved"))
        first += len(part.gpus)
    sess.flush()
    return True
