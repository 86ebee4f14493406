"""Downsampled history: at most ``points`` buckets per GPU with min/avg/max, bucketed in the database.

PostgreSQL buckets with ``date_bin`` from the start of the range; SQLite with
the same arithmetic on ``julianday``. Ranges that reach back past raw
retention are answered from the one-minute rollups (``gpu_metrics_rollup``),
with buckets that are whole minutes.
"""

from __future__ import annotations

import json
import math
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

from sqlalchemy import Engine, select, text

from gpufleet.config import StoreSettings, TelemetrySettings
from gpufleet.db.models import Host
from gpufleet.db.session import engine_for
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

# avg() of a BIGINT is NUMERIC on PostgreSQL (a Decimal in Python): ask for a float.
_RAW_AGGS = ", ".join(f"min({m}) AS {m}_min, CAST(avg({m}) AS DOUBLE PRECISION) AS {m}_avg, max({m}) AS {m}_max"
                      for m in METRICS)
_AGG_COLS = ", ".join(f"{m}_{a}" for m in METRICS for a in ("min", "avg", "max"))
# Rollups store partial aggregates; averages are weighted by sample counts.
_ROLLUP_AGGS = (
    "min(utilization_min) AS utilization_min, sum(utilization_avg * samples) / sum(samples) AS utilization_avg, "
    "max(utilization_max) AS utilization_max, min(memory_used_min) AS memory_used_min, "
    "sum(memory_used_avg * samples) / sum(samples) AS memory_used_avg, max(memory_used_max) AS memory_used_max, "
    "CAST(NULL AS DOUBLE PRECISION) AS temperature_min, "
    "sum(temperature_avg * samples) / sum(samples) AS temperature_avg, max(temperature_max) AS temperature_max, "
    "CAST(NULL AS DOUBLE PRECISION) AS power_draw_min, "
    "sum(power_draw_avg * samples) / sum(samples) AS power_draw_avg, max(power_draw_max) AS power_draw_max"
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


Key = tuple[Any, Any]  # (host id, gpu index), or (None, None) when aggregated
Cell = list[Any]  # [samples, then min/avg/max per metric]


def _run(engine: Engine, q: HistoryQuery, name_to_id: dict[str, uuid.UUID], *, rollup: bool,
         lo: datetime, hi: datetime, origin: datetime, step: timedelta) -> dict[Key, dict[int, Cell]]:
    """Bucket one table over [lo, hi); returns cells by series and bucket number."""
    pg = engine.dialect.name == "postgresql"
    table, tcol = ("gpu_metrics_rollup", "bucket") if rollup else ("gpu_metrics_history", "timestamp")
    bucket = (_PG_BUCKET if pg else _SQLITE_BUCKET).replace('"timestamp"', f'"{tcol}"')
    aggs = _ROLLUP_AGGS if rollup else _RAW_AGGS
    count = "sum(samples)" if rollup else "count(*)"

    def host_param(name: str) -> Any:
        return name_to_id[name] if pg else name_to_id[name].hex

    params: dict[str, Any] = {
        "lo": lo if pg else sqlite_ts(lo), "hi": hi if pg else sqlite_ts(hi),
        "origin": origin if pg else sqlite_ts(origin),
        "step_s": step.total_seconds(), "step_ms": int(step / timedelta(milliseconds=1)),
    }
    where = [f'"{tcol}" >= :lo', f'"{tcol}" < :hi']
    if q.host:
        where.append("host_id = :host_id")
        params["host_id"] = host_param(q.host)
    if q.gpus:
        ors = []
        for i, g in enumerate(q.gpus):
            params[f"gi{i}"] = g.index
            if g.host:
                params[f"gh{i}"] = host_param(g.host)
                ors.append(f"(host_id = :gh{i} AND gpu_index = :gi{i})")
            else:
                ors.append(f"gpu_index = :gi{i}")
        where.append("(" + " OR ".join(ors) + ")")
    keys = "" if q.aggregate else "host_id, gpu_index, "
    sql = f"SELECT {keys}{bucket} AS b, {count} AS n, {aggs} FROM {table} WHERE {' AND '.join(where)} GROUP BY {keys}b"
    out: dict[Key, dict[int, Cell]] = {}
    if pg:
        # One JSON array per series, built by the server: thousands of
        # buckets cross the wire as one value each instead of 14 typed
        # columns per bucket, which is most of the cost of a 1,000-point query.
        # Bucket starts lie on the grid, so round() (not floor) gives their number.
        outer_keys = "" if q.aggregate else "host_id::text, gpu_index, "
        group = "" if q.aggregate else " GROUP BY host_id, gpu_index"
        sql = (f"SELECT {outer_keys}json_agg(json_build_array("
               f"round(extract(epoch FROM b - CAST(:origin AS timestamptz)) / :step_s)::int, n, {_AGG_COLS})"
               f")::text FROM ({sql}) AS buckets{group}")
        with engine.connect() as conn:
            for r in conn.execute(text(sql), params):
                key: Key = (None, None) if q.aggregate else (uuid.UUID(r[0]), r[1])
                if r[-1] is None:
                    continue
                out[key] = {c[0]: c[1:] for c in json.loads(r[-1])}
        return out
    with engine.connect() as conn:
        rows = conn.execute(text(sql), params).all()
    nkeys = 0 if q.aggregate else 2
    for r in rows:
        if q.aggregate:
            key = (None, None)
        else:
            key = (uuid.UUID(str(r[0])), r[1])
        out.setdefault(key, {})[int(r[nkeys])] = [int(r[nkeys + 1]), *r[nkeys + 2:]]
    return out


def _merge(a: Cell, b: Cell) -> Cell:
    """One bucket made of rolled-up minutes and raw samples."""
    n = a[0] + b[0]
    out: Cell = [n]
    for j in range(len(METRICS)):
        mins = [x for x in (a[1 + 3 * j], b[1 + 3 * j]) if x is not None]
        maxs = [x for x in (a[3 + 3 * j], b[3 + 3 * j]) if x is not None]
        avgs = [(x, w) for x, w in ((a[2 + 3 * j], a[0]), (b[2 + 3 * j], b[0])) if x is not None]
        wsum = sum(w for _, w in avgs)
        out += [min(mins) if mins else None, sum(x * w for x, w in avgs) / wsum if wsum else None,
                max(maxs) if maxs else None]
    return out


def _rolled_until(engine: Engine, lo: datetime, hi: datetime) -> datetime | None:
    """The end of the newest rolled-up minute in [lo, hi), if any."""
    pg = engine.dialect.name == "postgresql"
    with engine.connect() as conn:
        v = conn.execute(text("SELECT max(bucket) FROM gpu_metrics_rollup WHERE bucket >= :lo AND bucket < :hi"),
                         {"lo": lo if pg else sqlite_ts(lo), "hi": hi if pg else sqlite_ts(hi)}).scalar()
    if v is None:
        return None
    if isinstance(v, str):
        v = datetime.fromisoformat(v).replace(tzinfo=timezone.utc)
    return v + timedelta(minutes=1)


def query_history(store_settings: StoreSettings, telemetry_settings: TelemetrySettings, q: HistoryQuery, *,
                  engine: Engine | None = None, now: datetime | None = None) -> HistoryResult:
    """Downsample the history.

    ``source="auto"`` answers a bucket of a minute or more from the one-minute
    rollups where they exist and from raw samples after them (the newest
    minutes are rolled up a few minutes late), merging the bucket that holds
    both; finer buckets come from raw samples only.
    """
    engine = engine or engine_for(store_settings)
    now = now or datetime.now(timezone.utc)
    by_id, _ = _resolve_hosts(engine, q)
    name_to_id = {v: k for k, v in by_id.items()}
    coarse = q.step(False) >= timedelta(minutes=1)
    use_rollup = q.source == "rollup" or (q.source == "auto" and (
        coarse or q.start < now - timedelta(days=telemetry_settings.retention_days)))
    step = q.step(use_rollup)
    # Rollup buckets are whole minutes, so their grid starts on a minute.
    origin = q.start.replace(second=0, microsecond=0) if use_rollup else q.start
    cells: dict[Key, dict[int, Cell]]
    source = "raw"
    if not use_rollup:
        cells = _run(engine, q, name_to_id, rollup=False, lo=q.start, hi=q.end, origin=origin, step=step)
    elif q.source == "rollup":
        source = "rollup"
        cells = _run(engine, q, name_to_id, rollup=True, lo=origin, hi=q.end, origin=origin, step=step)
    else:
        frontier = _rolled_until(engine, origin, q.end)
        frontier = min(frontier, q.end) if frontier else origin
        cells = {}
        if frontier > origin:
            source = "rollup"
            cells = _run(engine, q, name_to_id, rollup=True, lo=origin, hi=frontier, origin=origin, step=step)
        if frontier < q.end:
            source = "rollup+raw" if source == "rollup" else "raw"
            raw = _run(engine, q, name_to_id, rollup=False, lo=max(frontier, q.start), hi=q.end,
                       origin=origin, step=step)
            for key, buckets in raw.items():
                mine = cells.setdefault(key, {})
                for idx, cell in buckets.items():
                    mine[idx] = _merge(mine[idx], cell) if idx in mine else cell

    series = []
    names = ("t", "samples", *(f"{m}_{agg}" for m in METRICS for agg in ("min", "avg", "max")))
    stamps: dict[int, str] = {}  # bucket number -> its time, shared by every series
    for key, buckets in cells.items():
        s = Series(by_id.get(key[0]) if key[0] else None, key[1])
        for idx in sorted(buckets):
            t = stamps.get(idx)
            if t is None:
                t = stamps[idx] = (origin + step * idx).astimezone(timezone.utc).isoformat()
            s.points.append(dict(zip(names, (t, *buckets[idx]), strict=True)))
        series.append(s)
    series.sort(key=lambda s: (s.host or "", s.gpu_index or 0))
    return HistoryResult(q.start, q.end, step.total_seconds(), source, series)
