"""Downsampled history: at most ``points`` buckets per GPU with min/avg/max, bucketed in the database.

PostgreSQL buckets with ``date_bin`` from the start of the range; SQLite with
the same arithmetic on ``julianday``. Ranges that reach back past raw
retention are answered from the one-minute rollups (``gpu_metrics_rollup``),
with buckets that are whole minutes.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

from sqlalchemy import Engine, select, text

from gpufleet.config import Settings
from gpufleet.db.models import Host
from gpufleet.db.session import get_engine
from gpufleet.telemetry.retention import sqlite_ts

MAX_POINTS = 5000
MAX_RANGE = timedelta(days=3660)
METRICS = ("utilization", "memory_used", "temperature", "power_draw")


class HistoryError(ValueError):
    """A history request that cannot be answered; the message says what to change."""


@dataclass(frozen=True)
class GPURef:
    host: str | None  # None: this index on every host
    index: int

    @classmethod
    def parse(cls, text_: str) -> GPURef:
        """``3`` or ``host-a:3``."""
        host, sep, idx = text_.strip().rpartition(":")
        try:
            index = int(idx)
        except ValueError:
            raise HistoryError(
                f"gpu={text_!r} is not a GPU; write an index (gpu=0) or host:index (gpu=a100-01:0)"
            ) from None
        if index < 0:
            raise HistoryError(f"gpu={text_!r}: the index must be 0 or more")
        return cls(host if sep else None, index)


@dataclass(frozen=True)
class HistoryQuery:
    start: datetime
    end: datetime
    points: int = 300
    gpus: tuple[GPURef, ...] = ()
    host: str | None = None
    aggregate: bool = False
    source: Literal["auto", "raw", "rollup"] = "auto"

    def __post_init__(self) -> None:
        if self.start.tzinfo is None or self.end.tzinfo is None:
            raise HistoryError("from and to need a time zone, e.g. 2026-11-21T10:00:00Z")
        if self.end <= self.start:
            raise HistoryError(f"to ({self.end.isoformat()}) must be after from ({self.start.isoformat()})")
        if self.end - self.start > MAX_RANGE:
            raise HistoryError("the range may span at most 10 years")
        if not 1 <= self.points <= MAX_POINTS:
            raise HistoryError(f"points must be between 1 and {MAX_POINTS}, got {self.points}")

    def step(self, rollup: bool) -> timedelta:
        span_ms = (self.end - self.start) / timedelta(milliseconds=1)
        step_ms = max(1000, math.ceil(span_ms / self.points))
        if rollup:
            # Rollups are minutes: a bucket holds whole minutes.
            step_ms = max(60_000, math.ceil(step_ms / 60_000) * 60_000)
        return timedelta(milliseconds=step_ms)


@dataclass
class Series:
    host: str | None
    gpu_index: int | None
    points: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class HistoryResult:
    start: datetime
    end: datetime
    step_s: float
    source: str
    series: list[Series]


_PG_BUCKET = "date_bin(make_interval(secs => :step_s), \"timestamp\", :origin)"
# julianday is a float: round to whole milliseconds before the integer division,
# or a sample exactly on a bucket edge falls into the bucket before.
_SQLITE_BUCKET = "CAST(round((julianday(\"timestamp\") - julianday(:origin)) * 86400000.0) AS INTEGER) / :step_ms"

_RAW_AGGS = ", ".join(f"min({m}), avg({m}), max({m})" for m in METRICS)
# Rollups store partial aggregates; averages are weighted by sample counts.
_ROLLUP_AGGS = (
    "min(utilization_min), sum(utilization_avg * samples) / sum(samples), max(utilization_max), "
    "min(memory_used_min), sum(memory_used_avg * samples) / sum(samples), max(memory_used_max), "
    "NULL, sum(temperature_avg * samples) / sum(samples), max(temperature_max), "
    "NULL, sum(power_draw_avg * samples) / sum(samples), max(power_draw_max)"
)


def _resolve_hosts(engine: Engine, q: HistoryQuery) -> tuple[dict[uuid.UUID, str], set[str]]:
    names = {g.host for g in q.gpus if g.host} | ({q.host} if q.host else set())
    with engine.connect() as conn:
        rows = conn.execute(select(Host.id, Host.name)).all()
    by_id = {r.id: r.name for r in rows}
    unknown = names - set(by_id.values())
    if unknown:
        known = ", ".join(sorted(by_id.values())) or "none yet"
        raise HistoryError(f"unknown host {', '.join(sorted(unknown))}; known hosts: {known}")
    return by_id, names


def query_history(settings: Settings, q: HistoryQuery, *, engine: Engine | None = None,
                  now: datetime | None = None) -> HistoryResult:
    engine = engine or get_engine(settings.effective_database_url)
    pg = engine.dialect.name == "postgresql"
    now = now or datetime.now(timezone.utc)
    use_rollup = q.source == "rollup" or (
        q.source == "auto" and q.start < now - timedelta(days=settings.retention_days)
    )
    step = q.step(use_rollup)
    by_id, _ = _resolve_hosts(engine, q)
    name_to_id = {v: k for k, v in by_id.items()}

    table, tcol = ("gpu_metrics_rollup", "bucket") if use_rollup else ("gpu_metrics_history", "timestamp")
    bucket = (_PG_BUCKET if pg else _SQLITE_BUCKET).replace('"timestamp"', f'"{tcol}"')
    aggs = _ROLLUP_AGGS if use_rollup else _RAW_AGGS
    count = "sum(samples)" if use_rollup else "count(*)"
    params: dict[str, Any] = {
        "lo": q.start if pg else sqlite_ts(q.start),
        "hi": q.end if pg else sqlite_ts(q.end),
        "origin": q.start if pg else sqlite_ts(q.start),
        "step_s": step.total_seconds(),
        "step_ms": int(step / timedelta(milliseconds=1)),
    }
    where = [f'"{tcol}" >= :lo', f'"{tcol}" < :hi']
    if q.host:
        where.append("host_id = :host_id")
        params["host_id"] = name_to_id[q.host] if pg else name_to_id[q.host].hex
    if q.gpus:
        ors = []
        for i, g in enumerate(q.gpus):
            params[f"gi{i}"] = g.index
            if g.host:
                params[f"gh{i}"] = name_to_id[g.host] if pg else name_to_id[g.host].hex
                ors.append(f"(host_id = :gh{i} AND gpu_index = :gi{i})")
            else:
                ors.append(f"gpu_index = :gi{i}")
        where.append("(" + " OR ".join(ors) + ")")
    keys = "" if q.aggregate else "host_id, gpu_index, "
    sql = (
        f"SELECT {keys}{bucket} AS b, {count}, {aggs} FROM {table} "
        f"WHERE {' AND '.join(where)} GROUP BY {keys}b ORDER BY {keys}b"
    )
    with engine.connect() as conn:
        rows = conn.execute(text(sql), params).all()

    series: dict[tuple[Any, Any], Series] = {}
    for r in rows:
        if q.aggregate:
            key, rest = (None, None), tuple(r)
        else:
            hid = r[0] if isinstance(r[0], uuid.UUID) else uuid.UUID(str(r[0]))
            key, rest = (hid, r[1]), tuple(r[2:])
        s = series.get(key)
        if s is None:
            s = series[key] = Series(by_id.get(key[0]) if key[0] else None, key[1])
        b, n, *vals = rest
        t = b if pg else q.start + step * int(b)
        point: dict[str, Any] = {"t": t.astimezone(timezone.utc).isoformat(), "samples": int(n)}
        for j, m in enumerate(METRICS):
            for k, agg in enumerate(("min", "avg", "max")):
                v = vals[3 * j + k]
                point[f"{m}_{agg}"] = None if v is None else float(v)
        s.points.append(point)
    ordered = sorted(series.values(), key=lambda s: (s.host or "", s.gpu_index or 0))
    return HistoryResult(q.start, q.end, step.total_seconds(), "rollup" if use_rollup else "raw", ordered)
