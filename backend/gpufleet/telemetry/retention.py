"""Keeping ``gpu_metrics_history`` bounded: daily partitions, one-minute rollups, expiry.

PostgreSQL: the table is partitioned by RANGE(timestamp) with a DEFAULT
partition (initial migration). :func:`ensure_partitions` creates one partition
per day a few days ahead; expiry drops whole partitions, which costs the same
whatever the table's size. Rows that landed in the default partition (written
before their day's partition existed) are moved into the day's partition when
it is created, and deleted there by time when they expire.

SQLite: one table; expiry deletes by time range in chunks so the embedded
server never holds a long write lock.

Rollups (``gpu_metrics_rollup``) are written for every finished minute before
raw rows expire, and kept for ``rollup_retention_days``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone

from sqlalchemy import Connection, Engine, text

from gpufleet.config import StoreSettings, TelemetrySettings
from gpufleet.db.session import engine_for

log = logging.getLogger(__name__)

PARENT = "gpu_metrics_history"
DEFAULT_PART = "gpu_metrics_history_default"
# Only one process at a time changes partitions (every fleet agent runs this).
ADVISORY_LOCK_KEY = 0x6770_7566  # "gpuf"


def sqlite_ts(t: datetime) -> str:
    """A UTC time in the text form SQLAlchemy stores on SQLite, for raw SQL comparisons."""
    return t.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")


def partition_name(day: date) -> str:
    return f"{PARENT}_p{day:%Y%m%d}"


def _day_start(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=timezone.utc)


def _existing_partitions(conn: Connection) -> dict[str, date]:
    rows = conn.execute(
        text(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = :parent"
        ),
        {"parent": PARENT},
    ).scalars()
    out: dict[str, date] = {}
    for name in rows:
        suffix = name.removeprefix(PARENT + "_p")
        if suffix != name and len(suffix) == 8 and suffix.isdigit():
            out[name] = datetime.strptime(suffix, "%Y%m%d").date()
    return out


def _create_day_partition(conn: Connection, day: date) -> None:
    name = partition_name(day)
    lo, hi = _day_start(day), _day_start(day + timedelta(days=1))
    # Creating the partition directly would fail if the default partition
    # already holds rows of that day, so build it detached, move those rows
    # in, then attach it.
    conn.execute(text(f'CREATE TABLE "{name}" (LIKE {PARENT} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)'))
    conn.execute(
        text(
            f'WITH moved AS (DELETE FROM {DEFAULT_PART} WHERE "timestamp" >= :lo AND "timestamp" < :hi '
            f'RETURNING *) INSERT INTO "{name}" SELECT * FROM moved'
        ),
        {"lo": lo, "hi": hi},
    )
    conn.execute(
        text(
            f"ALTER TABLE {PARENT} ATTACH PARTITION \"{name}\" "
            f"FOR VALUES FROM ('{lo.isoformat()}') TO ('{hi.isoformat()}')"
        )
    )


def ensure_partitions(engine: Engine, *, days_ahead: int = 2, today: date | None = None) -> list[str]:
    """Create the daily partitions for today and ``days_ahead`` days; return those created."""
    if engine.dialect.name != "postgresql":
        return []
    today = today or datetime.now(timezone.utc).date()
    created: list[str] = []
    with engine.begin() as conn:
        if not conn.execute(text("SELECT pg_try_advisory_xact_lock(:k)"), {"k": ADVISORY_LOCK_KEY}).scalar():
            return []
        have = set(_existing_partitions(conn).values())
        for i in range(days_ahead + 1):
            day = today + timedelta(days=i)
            if day not in have:
                _create_day_partition(conn, day)
                created.append(partition_name(day))
    if created:
        log.info("created metric partitions %s", ", ".join(created))
    return created


_ROLLUP_PG = """
INSERT INTO gpu_metrics_rollup (host_id, gpu_index, bucket, samples,
    utilization_min, utilization_avg, utilization_max,
    memory_used_min, memory_used_avg, memory_used_max, memory_total,
    temperature_max, temperature_avg, power_draw_avg, power_draw_max)
SELECT host_id, gpu_index, date_bin('1 minute', "timestamp", TIMESTAMPTZ '2000-01-01') AS b, count(*),
    min(utilization), avg(utilization), max(utilization),
    min(memory_used), avg(memory_used), max(memory_used), max(memory_total),
    max(temperature), avg(temperature), avg(power_draw), max(power_draw)
FROM gpu_metrics_history WHERE "timestamp" >= :lo AND "timestamp" < :hi
GROUP BY host_id, gpu_index, b
ON CONFLICT (host_id, gpu_index, bucket) DO UPDATE SET
    samples = EXCLUDED.samples,
    utilization_min = EXCLUDED.utilization_min, utilization_avg = EXCLUDED.utilization_avg,
    utilization_max = EXCLUDED.utilization_max, memory_used_min = EXCLUDED.memory_used_min,
    memory_used_avg = EXCLUDED.memory_used_avg, memory_used_max = EXCLUDED.memory_used_max,
    memory_total = EXCLUDED.memory_total, temperature_max = EXCLUDED.temperature_max,
    temperature_avg = EXCLUDED.temperature_avg, power_draw_avg = EXCLUDED.power_draw_avg,
    power_draw_max = EXCLUDED.power_draw_max
"""

# SQLite stores timestamps as 'YYYY-MM-DD HH:MM:SS[.ffffff]' in UTC; the first
# 16 characters are the minute.
_ROLLUP_SQLITE = _ROLLUP_PG.replace(
    "date_bin('1 minute', \"timestamp\", TIMESTAMPTZ '2000-01-01')",
    "substr(\"timestamp\", 1, 16) || '\\:00.000000'",
)


def rollup(engine: Engine, lo: datetime, hi: datetime) -> int:
    """(Re)compute the one-minute rollups of [lo, hi); both must be whole minutes."""
    if lo.second or lo.microsecond or hi.second or hi.microsecond:
        raise ValueError("rollup bounds must be whole minutes")
    sql = _ROLLUP_PG if engine.dialect.name == "postgresql" else _ROLLUP_SQLITE
    params: dict[str, object] = {"lo": lo, "hi": hi}
    if engine.dialect.name != "postgresql":
        params = {"lo": sqlite_ts(lo), "hi": sqlite_ts(hi)}
    with engine.begin() as conn:
        return conn.execute(text(sql), params).rowcount or 0


@dataclass
class RetentionResult:
    dropped_partitions: list[str]
    deleted_rows: int
    deleted_rollups: int


def expire(store_settings: StoreSettings, telemetry_settings: TelemetrySettings, *, now: datetime | None = None,
           engine: Engine | None = None, chunk: int = 5000) -> RetentionResult:
    """Drop raw samples older than ``retention_days`` and rollups older than ``rollup_retention_days``."""
    engine = engine or engine_for(store_settings)
    now = now or datetime.now(timezone.utc)
    raw_cutoff = now - timedelta(days=telemetry_settings.retention_days)
    rollup_cutoff = now - timedelta(days=telemetry_settings.rollup_retention_days)
    dropped: list[str] = []
    deleted = 0
    if engine.dialect.name == "postgresql":
        with engine.begin() as conn:
            if not conn.execute(text("SELECT pg_try_advisory_xact_lock(:k)"), {"k": ADVISORY_LOCK_KEY}).scalar():
                return RetentionResult([], 0, 0)
            for name, day in sorted(_existing_partitions(conn).items(), key=lambda kv: kv[1]):
                # A partition goes only once its whole day is past the cutoff.
                if _day_start(day + timedelta(days=1)) <= raw_cutoff:
                    conn.execute(text(f'DROP TABLE "{name}"'))
                    dropped.append(name)
            deleted = conn.execute(
                text(f'DELETE FROM {DEFAULT_PART} WHERE "timestamp" < :c'), {"c": raw_cutoff}
            ).rowcount or 0
            deleted_rollups = conn.execute(
                text("DELETE FROM gpu_metrics_rollup WHERE bucket < :c"), {"c": rollup_cutoff}
            ).rowcount or 0
    else:
        naive = sqlite_ts(raw_cutoff)
        while True:
            with engine.begin() as conn:
                n = conn.execute(
                    text(
                        'DELETE FROM gpu_metrics_history WHERE rowid IN (SELECT rowid FROM gpu_metrics_history '
                        'WHERE "timestamp" < :c LIMIT :n)'
                    ),
                    {"c": naive, "n": chunk},
                ).rowcount or 0
            deleted += n
            if n < chunk:
                break
        with engine.begin() as conn:
            deleted_rollups = conn.execute(
                text("DELETE FROM gpu_metrics_rollup WHERE bucket < :c"),
                {"c": sqlite_ts(rollup_cutoff)},
            ).rowcount or 0
    if dropped or deleted or deleted_rollups:
        log.info("retention: dropped %s, deleted %d raw rows and %d rollups", dropped, deleted, deleted_rollups)
    return RetentionResult(dropped, deleted, deleted_rollups)


def floor_minute(t: datetime) -> datetime:
    return t.replace(second=0, microsecond=0)


def maintain(store_settings: StoreSettings, telemetry_settings: TelemetrySettings, *, now: datetime | None = None,
             lookback: timedelta = timedelta(minutes=30)) -> None:
    """One maintenance pass: partitions ahead, rollups of the recent minutes, expiry.

    Rollups are recomputed from ``lookback`` before the newest rolled-up
    minute, so rows that arrive late (buffered through a database outage of
    up to that long) are counted; the upsert makes recomputing harmless.
    """
    engine = engine_for(store_settings)
    now = now or datetime.now(timezone.utc)
    if engine.dialect.name != "postgresql":
        _maintain(store_settings, telemetry_settings, engine, now, lookback)
        return
    # Every fleet agent runs this; one pass at a time is enough.
    with engine.connect() as lock_conn:
        if not lock_conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": ADVISORY_LOCK_KEY + 1}).scalar():
            lock_conn.rollback()
            return
        try:
            _maintain(store_settings, telemetry_settings, engine, now, lookback)
        finally:
            lock_conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": ADVISORY_LOCK_KEY + 1})
            lock_conn.commit()


def _maintain(store_settings: StoreSettings, telemetry_settings: TelemetrySettings, engine: Engine, now: datetime,
              lookback: timedelta) -> None:
    ensure_partitions(engine, today=now.date())
    hi = floor_minute(now)
    with engine.connect() as conn:
        last = conn.execute(text("SELECT max(bucket) FROM gpu_metrics_rollup")).scalar()
    if isinstance(last, str):  # SQLite hands back text
        last = datetime.fromisoformat(last).replace(tzinfo=timezone.utc)
    floor = floor_minute(now - timedelta(days=telemetry_settings.retention_days))
    lo = max(floor, floor_minute(last - lookback) if last else floor)
    # In day-sized steps, so a first pass over a week of samples stays a series of short transactions.
    while lo < hi:
        step_hi = min(hi, lo + timedelta(days=1))
        rollup(engine, lo, step_hi)
        lo = step_hi
    _store_usage(store_settings, now)
    expire(store_settings, telemetry_settings, now=now, engine=engine)
    from gpufleet.users.idempotency import forget_expired

    forget_expired(store_settings)  # creates' idempotency keys past their window


def _store_usage(settings: StoreSettings, now: datetime) -> None:
    """Keep yesterday's and today's usage per training (gpufleet.users.usage) beside the rollups."""
    from gpufleet.db.session import write_session
    from gpufleet.users.usage import store_usage

    with write_session(settings) as sess:
        store_usage(sess, now.date() - timedelta(days=1), now.date(), now)
