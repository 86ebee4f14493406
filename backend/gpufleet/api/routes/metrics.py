"""GPU metrics over HTTP: downsampled history, the live view, and Prometheus ``/metrics``."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Response
from sqlalchemy import select

from gpufleet.api.deps import SessionDep, SettingsDep
from gpufleet.api.hosts import UNKNOWN_HOST, check_host
from gpufleet.bounds import MAX_GPU_INDEX
from gpufleet.db.models import Training
from gpufleet.telemetry.aggregate import aggregate_by_host, compute_aggregated
from gpufleet.telemetry.history import MAX_POINTS, GPURef, HistoryError, HistoryQuery, query_history
from gpufleet.telemetry.live import read_live_samples
from gpufleet.wire.metrics import HistoryPublic, LivePublic

router = APIRouter()


def _parse_time(name: str, value: str | None, default: datetime) -> datetime:
    if value is None or value == "":
        return default
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00").replace(" ", "+"))
    except ValueError:
        raise HTTPException(422, f"{name}={value!r} is not a time; use ISO 8601 such as 2026-11-21T10:00:00Z") from None
    if t.tzinfo is None:
        raise HTTPException(422, f"{name}={value!r} has no time zone; add Z or +00:00")
    return t


@router.get(
    "/api/v1/system/metrics/history",
    response_model=HistoryPublic,
    operation_id="metrics-history",
    tags=["metrics"],
    responses=UNKNOWN_HOST,
)
def metrics_history(
    settings: SettingsDep,
    sess: SessionDep,
    gpu: Annotated[list[str] | None, Query(description="index or host:index; repeat or comma-separate")] = None,
    host: Annotated[str | None, Query(description="only this host's GPUs (404 if it is not registered)")] = None,
    from_: Annotated[str | None, Query(alias="from", description="ISO 8601 start (default: 1 h before to)")] = None,
    to: Annotated[str | None, Query(description="ISO 8601 end (default: now)")] = None,
    points: Annotated[int, Query(ge=1, le=MAX_POINTS, description="at most this many buckets per GPU")] = 300,
    aggregate: Annotated[bool, Query(description="one series over all selected GPUs")] = False,
) -> HistoryPublic:
    """At most ``points`` buckets per GPU, each with min/avg/max, bucketed in the database."""
    check_host(sess, host)
    end = _parse_time("to", to, datetime.now(timezone.utc))
    start = _parse_time("from", from_, end - timedelta(hours=1))
    try:
        refs = tuple(GPURef.parse(p) for g in (gpu or []) for p in g.split(",") if p.strip())
        for ref in refs:
            if ref.index > MAX_GPU_INDEX:
                raise HistoryError(f"gpu index {ref.index} is out of range; GPU indexes are 0 to {MAX_GPU_INDEX}")
        q = HistoryQuery(start=start, end=end, points=points, gpus=refs, host=host, aggregate=aggregate)
        res = query_history(settings, settings, q)
    except HistoryError as exc:
        raise HTTPException(422, str(exc)) from None
    # Thousands of points: validating each through pydantic would cost more
    # than the query. query_history already returns exactly HistoryPublic's
    # shape (the schema above is what OpenAPI and the dashboard's client see).
    body = {"start": res.start.isoformat(), "end": res.end.isoformat(), "step_s": res.step_s,
            "source": res.source, "aggregate": aggregate,
            "series": [{"host": s.host, "gpu_index": s.gpu_index, "points": s.points} for s in res.series]}
    return Response(json.dumps(body), media_type="application/json")  # type: ignore[return-value]


@router.get("/api/v1/system/metrics/live", response_model=LivePublic, operation_id="metrics-live", tags=["metrics"])
def metrics_live(settings: SettingsDep, sess: SessionDep) -> LivePublic:
    """The newest sample of every GPU, the aggregates, and who holds each GPU."""
    samples = read_live_samples(settings)
    ids = {p.training_id for s in samples for p in s.processes if p.training_id}
    trainings: dict[str, dict[str, Any]] = {}
    if ids:
        for t in sess.scalars(select(Training).where(Training.id.in_(list(ids)))):
            trainings[str(t.id)] = {"name": t.name, "owner": t.owner, "status": t.status, "step": t.step,
                                    "max_steps": t.max_steps, "kind": t.kind}
    return LivePublic(
        gpus=[s.to_dict() for s in samples],
        aggregate=compute_aggregated(samples).to_dict(),
        hosts={h: a.to_dict() for h, a in aggregate_by_host(samples).items()},
        trainings=trainings,
    )


@router.get("/metrics", include_in_schema=False)
def prometheus_metrics(settings: SettingsDep) -> Response:
    """Prometheus exposition: dcgm-exporter's names for GPUs, ``gpufleet_*`` for the rest."""
    from prometheus_client import CONTENT_TYPE_LATEST

    from gpufleet.telemetry.prometheus import render

    return Response(render(settings), media_type=CONTENT_TYPE_LATEST)
