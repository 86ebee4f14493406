"""Gather selection's inputs from the database and the live samples.

The one place where scheduling touches the schema: the API routes and the jobs
scheduler both call :func:`fleet_state` / :func:`availability_by_gpu` and hand
the plain dataclasses to the pure functions in ``availability``,
``recommend`` and ``validate``.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from statistics import median

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.config import HostSettings, SchedulerSettings, StoreSettings, TelemetrySettings
from gpufleet.db.models import GPU, GPUAllocation, GPULink, GPUMetricsHistory, Host, Training, TrainingMetric
from gpufleet.db.types import utcnow
from gpufleet.scheduling.availability import assess_gpu
from gpufleet.scheduling.types import (
    AvailabilityPolicy,
    FleetState,
    GPUAvailability,
    GPUObservation,
    HostState,
    LinkInfo,
    MiB,
    ProcessInfo,
    Reservation,
)
from gpufleet.telemetry.inventory import HEARTBEAT_S
from gpufleet.telemetry.sample import GPUSample

_OFFLINE = {"offline", "lost", "down"}

# Error counters are cumulative; a GPU is unhealthy when they grow. The first
# count this process sees is the baseline, so errors from before the server
# started (already looked at) do not keep a GPU out forever.
_baseline_lock = threading.Lock()
_error_baseline: dict[tuple[str, str], tuple[int, int]] = {}


def reset_error_baseline(host: str | None = None, gpu_key: str | None = None) -> None:
    """Accept the current error counts as good (after an operator checked the GPU)."""
    with _baseline_lock:
        for key in list(_error_baseline):
            if (host is None or key[0] == host) and (gpu_key is None or key[1] == gpu_key):
                del _error_baseline[key]


def _new_errors(host: str, gpu_key: str, ecc: int | None, xid: int | None) -> tuple[int, int]:
    ecc, xid = ecc or 0, xid or 0
    with _baseline_lock:
        base = _error_baseline.setdefault((host, gpu_key), (ecc, xid))
    return max(ecc - base[0], 0), max(xid - base[1], 0)


def _stale_after_s(settings: TelemetrySettings) -> float:
    # Three missed heartbeats, and never less than half a minute.
    return max(3 * float(HEARTBEAT_S), 30.0, 5 * settings.sample_interval_s)


def host_offline(status: str | None, last_heartbeat: datetime | None, settings: TelemetrySettings,
                 now: datetime | None = None) -> bool:
    """A host is offline when marked so, or when its heartbeat is older than a few intervals."""
    if (status or "").lower() in _OFFLINE:
        return True
    if last_heartbeat is None:
        return False  # registered, never beat yet: the first heartbeat comes with the first round
    return (now or utcnow()) - last_heartbeat > timedelta(seconds=_stale_after_s(settings))


def policy_from_settings(scheduler_settings: SchedulerSettings, host_settings: HostSettings) -> AvailabilityPolicy:
    return AvailabilityPolicy(
        foreign_memory_threshold=scheduler_settings.foreign_memory_threshold_mb * MiB,
        max_models_per_gpu=host_settings.gpu.max_models_per_gpu,
    )


def _recent_utilization(
    sess: Session, settings: TelemetrySettings, samples: int, host: str | None = None
) -> dict[tuple[object, int], list[float]]:
    # Twice the window the samples should span, so one late sample does not
    # make sustained load look like a blip.
    since = utcnow() - timedelta(seconds=settings.sample_interval_s * samples * 2 + 1)
    # Only samples no gpufleet process was in: a training that just ended (a sweep's trial, say) leaves
    # its busy samples behind, and they are this server's load, never someone else's.
    q = (
        select(GPUMetricsHistory.host_id, GPUMetricsHistory.gpu_index, GPUMetricsHistory.utilization)
        .where(GPUMetricsHistory.timestamp >= since, GPUMetricsHistory.job_id.is_(None))
        .order_by(GPUMetricsHistory.timestamp)
    )
    if host is not None:  # one host's samples, not the fleet's (the scheduler asks per host)
        q = q.join(Host, Host.id == GPUMetricsHistory.host_id).where(Host.name == host)
    rows = sess.execute(q)
    out: dict[tuple[object, int], list[float]] = {}
    for host_id, index, util in rows:
        out.setdefault((host_id, index), []).append(float(util))
    return out


def gather_observations(
    sess: Session, store_settings: StoreSettings, telemetry_settings: TelemetrySettings, *,
    policy: AvailabilityPolicy, host: str | None = None,
) -> tuple[list[GPUObservation], dict[str, dict[tuple[int, int], LinkInfo]]]:
    """Every GPU of the fleet (or of ``host``) as an observation under ``policy``, and each host's links."""
    from gpufleet.telemetry.live import read_live_samples

    q = (
        select(GPU, Host.name, Host.status, Host.last_heartbeat)
        .join(Host, GPU.host_id == Host.id)
        .order_by(Host.name, GPU.index)
    )
    if host is not None:
        q = q.where(Host.name == host)
    gpu_rows = sess.execute(q).all()
    links = _links(sess, host)
    reservations = _reservations(sess, host)
    live = {s.key: s for s in read_live_samples(store_settings)}
    recent = _recent_utilization(sess, telemetry_settings, policy.sustained_samples, host)
    now = utcnow()
    stale = timedelta(seconds=_stale_after_s(telemetry_settings))
    out = [
        _observation(gpu, hname, live.get((hname, gpu.index)), tuple(reservations.get(gpu.id, ())),
                     tuple(recent.get((gpu.host_id, gpu.index), ())),
                     # A host whose agent stopped beating has no worker either.
                     offline=(hstatus or "").lower() in _OFFLINE or (beat is not None and now - beat > stale))
        for gpu, hname, hstatus, beat in gpu_rows
    ]
    return out, links


def _links(sess: Session, host: str | None) -> dict[str, dict[tuple[int, int], LinkInfo]]:
    lq = select(GPULink, Host.name).join(Host, GPULink.host_id == Host.id)
    if host is not None:
        lq = lq.where(Host.name == host)
    links: dict[str, dict[tuple[int, int], LinkInfo]] = {}
    for link, hname in sess.execute(lq):
        a, b = sorted((link.gpu_a, link.gpu_b))
        links.setdefault(hname, {})[(a, b)] = LinkInfo(link.nvlink_count, link.pcie_level, link.peer_access)
    return links


def _reservations(sess: Session, host: str | None = None) -> dict[object, list[Reservation]]:
    """Each GPU's held reservations (of ``host``'s GPUs when given), by its row id.

    Plain columns, not ORM objects: a fleet of 10,000 GPUs holds as many rows.
    """
    reservations: dict[object, list[Reservation]] = {}
    aq = (
        select(GPUAllocation.gpu_id, GPUAllocation.training_id, GPUAllocation.exclusive,
               GPUAllocation.reserved_memory, Training.name, Training.owner, Training.kind)
        .join(Training, GPUAllocation.training_id == Training.id)
        .where(GPUAllocation.released_at.is_(None))
    )
    if host is not None:
        aq = aq.join(Host, Host.id == GPUAllocation.host_id).where(Host.name == host)
    for gpu_id, training_id, exclusive, reserved, tname, owner, kind in sess.execute(aq):
        reservations.setdefault(gpu_id, []).append(
            Reservation(
                training_id=str(training_id),
                exclusive=exclusive,
                reserved_memory=reserved,
                training_name=tname,
                owner=owner,
                kind=kind or "recipe",
            )
        )
    return reservations


def _observation(gpu: GPU, hname: str, s: GPUSample | None, reservations: tuple[Reservation, ...],
                 recent: tuple[float, ...], *, offline: bool) -> GPUObservation:
    """One GPU's row and its latest live sample (``s``, None when there is none)."""
    processes: tuple[ProcessInfo, ...] = ()
    ecc = xid = 0
    if s is not None:
        processes = tuple(
            ProcessInfo(
                pid=p.pid,
                used_memory=p.used_memory,
                user=p.user,
                command=p.command,
                training_id=str(p.training_id) if p.training_id else None,
                foreign=p.foreign,
            )
            for p in s.processes
        )
        ecc, xid = _new_errors(hname, gpu.uuid or str(gpu.index), s.ecc_errors, s.xid_errors)
    return GPUObservation(
        host=hname,
        index=gpu.index,
        vendor=gpu.vendor,
        backend=gpu.backend or "",
        name=gpu.name,
        memory_total=gpu.memory_total if gpu.memory_total is not None else (s.memory_total if s else None),
        memory_free=s.memory_free if s is not None else None,
        utilization=s.utilization if s is not None else None,
        recent_utilization=recent,
        processes=processes,
        reservations=reservations,
        compute_capability=gpu.compute_capability,
        drained=gpu.drained or not gpu.enabled,
        drain_reason=gpu.drain_reason if gpu.drained else ("disabled" if not gpu.enabled else None),
        status=gpu.status,
        status_reason=gpu.status_reason,
        lost=bool(s is not None and s.lost),
        new_ecc_errors=ecc,
        new_xid_errors=xid,
        host_offline=offline,
    )


def availability_by_gpu(
    sess: Session, scheduler_settings: SchedulerSettings, host_settings: HostSettings,
    store_settings: StoreSettings, telemetry_settings: TelemetrySettings, *, host: str | None = None
) -> dict[tuple[str, int], GPUAvailability]:
    """Each GPU's availability keyed by (host, index), for ``GET /system/gpus``."""
    policy = policy_from_settings(scheduler_settings, host_settings)
    observations, _ = gather_observations(sess, store_settings, telemetry_settings, host=host, policy=policy)
    return {(o.host, o.index): assess_gpu(o, policy) for o in observations}


def measured_speed(sess: Session, estimate_key: str | None, limit: int = 50) -> dict[str, float]:
    """GPU model -> samples/s per GPU, from trainings of the same recipe and shape.

    Only runs of the same workload are comparable, so the figures come from
    trainings with the same ``estimate_key``; each rank's step time is matched
    to the GPU that rank ran on.
    """
    if not estimate_key:
        return {}
    runs = sess.execute(
        select(Training.id, Training.gpu_ids, Training.host_id, Training.config)
        .where(Training.estimate_key == estimate_key, Training.gpu_ids.is_not(None), Training.host_id.is_not(None))
        .order_by(Training.created_at.desc())
        .limit(limit)
    ).all()
    per_model: dict[str, list[float]] = {}
    for tid, gpu_ids, host_id, config in runs:
        names = dict(sess.execute(select(GPU.index, GPU.name).where(GPU.host_id == host_id)).all())
        batch = (config or {}).get("micro_batch_size") or (config or {}).get("global_batch_size")
        if not batch:
            continue
        times = sess.scalars(
            select(TrainingMetric.rank_step_times)
            .where(TrainingMetric.training_id == tid, TrainingMetric.rank_step_times.is_not(None))
            .order_by(TrainingMetric.step.desc())
            .limit(20)
        ).all()
        for rank, gpu_index in enumerate(gpu_ids or []):
            per_rank = [t[rank] for t in times if t and len(t) > rank and t[rank]]
            if per_rank and gpu_index in names:
                per_model.setdefault(names[gpu_index], []).append(batch / median(per_rank))
    return {name: median(v) for name, v in per_model.items()}


def fleet_state(
    sess: Session, scheduler_settings: SchedulerSettings, host_settings: HostSettings,
    store_settings: StoreSettings, telemetry_settings: TelemetrySettings, *,
    host: str | None = None, estimate_key: str | None = None
) -> FleetState:
    """The whole fleet (or one host) as ``recommend`` and ``validate`` take it."""
    policy = policy_from_settings(scheduler_settings, host_settings)
    observations, links = gather_observations(sess, store_settings, telemetry_settings, host=host, policy=policy)
    by_host: dict[str, list[GPUAvailability]] = {}
    for o in observations:
        by_host.setdefault(o.host, []).append(assess_gpu(o, policy))
    hosts = tuple(HostState(name, tuple(gpus), links.get(name, {})) for name, gpus in by_host.items())
    return FleetState(hosts=hosts, measured_speed=measured_speed(sess, estimate_key))
