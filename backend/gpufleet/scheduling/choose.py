"""The jobs scheduler's choice of GPUs: :func:`~gpufleet.scheduling.recommend.recommend` over the database.

The scheduler's own bookkeeping knows which GPUs no reservation holds; this
adds what it cannot see (foreign processes, live free memory, NVLink) by
reading the fleet from the database and the live samples
(:func:`~gpufleet.scheduling.inputs.fleet_state`) and handing it to the pure
ranking in :mod:`gpufleet.scheduling.recommend`.
"""

from __future__ import annotations

from gpufleet.config import Settings
from gpufleet.db.session import session_scope
from gpufleet.scheduling.inputs import fleet_state
from gpufleet.scheduling.recommend import recommend
from gpufleet.scheduling.types import FleetState, HostState, SelectionRequest


def _scheduler_view(free: list[int], count: int, memory: int | None, host_name: str,
                    settings: Settings) -> tuple[SelectionRequest, FleetState] | None:
    with session_scope(settings) as sess:
        fleet = fleet_state(sess, settings, settings, settings, settings, host=host_name)
    host = fleet.host(host_name)
    if host is None:
        return None
    allowed = set(free)
    only = HostState(host.name, tuple(g for g in host.gpus if g.index in allowed), host.links)
    request = SelectionRequest(memory_bytes=memory or 0, count=count, host=host_name)
    return request, FleetState(hosts=(only,), measured_speed=fleet.measured_speed)


def choose_for_scheduler(
    free: list[int], count: int, memory: int | None, *, host_name: str, settings: Settings,
) -> tuple[list[int], str] | None:
    """The best ``count`` of ``free`` GPUs on ``host_name``, with the reason.

    ``free`` are the GPUs the scheduler's own bookkeeping found free. Returns
    ``(indexes, reason)``, or None when no set of ``free`` GPUs is usable now;
    then :func:`scheduler_wait_reason` says why, in words.
    """
    view = _scheduler_view(free, count, memory, host_name, settings)
    if view is None:
        return None
    rec = recommend(*view)
    if rec.top is None:
        return None
    return list(rec.top.gpu_indexes), "; ".join(rec.top.reasons)


def scheduler_wait_reason(
    free: list[int], count: int, memory: int | None, *, host_name: str, settings: Settings,
) -> str:
    """Why ``choose_for_scheduler`` found nothing, e.g. "needs 2 GPUs with 30.0 GiB free ..."."""
    view = _scheduler_view(free, count, memory, host_name, settings)
    if view is None:
        return f"host {host_name} is not in the fleet"
    rec = recommend(*view)
    return rec.refused or rec.wait_reason or "a usable set appeared since; retry"
