"""Writing samples into ``gpu_metrics_history``: batched, COPY on PostgreSQL, and patient.

The sampler never waits for the database. It hands samples to a
:class:`MetricsWriter`, which turns them into rows in a bounded buffer; a
flush writes the buffer in batches. While the database is unreachable the rows
stay in the buffer and the next flush writes them; when the buffer is full the
oldest rows are dropped, counted (``dropped_total``) and logged, because the
newest data is what people look at and memory must stay bounded.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, Insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from gpufleet.config import StoreSettings
from gpufleet.db.models import GPUMetricsHistory
from gpufleet.db.session import engine_for
from gpufleet.telemetry.sample import GPUSample

log = logging.getLogger(__name__)

# Column order of every row tuple and of the COPY statement.
COLUMNS = (
    "id", "timestamp", "host_id", "gpu_index", "utilization", "memory_used",
    "memory_total", "temperature", "power_draw", "job_id", "job_type",
)
COPY_TYPES = (
    "uuid", "timestamptz", "uuid", "int4", "float8", "int8",
    "int8", "float8", "float8", "uuid", "varchar",
)
COPY_SQL = f"COPY gpu_metrics_history ({', '.join(COLUMNS)}) FROM STDIN (FORMAT BINARY)"

Row = tuple[Any, ...]

class _Uuid7:
    """Time-ordered UUIDs (RFC 9562 version 7): 48-bit milliseconds, then a counter.

    The history's primary key starts with ``id``: random UUIDs land all over
    its B-tree, time-ordered ones append at its right edge, which is what lets
    the table take tens of thousands of rows a second. The counter (random
    start per process) keeps ids unique and ordered within a millisecond and is
    far cheaper than drawing random bytes for every row.
    """

    _VERSION = 0x7 << 76
    _VARIANT = 0b10 << 62
    _LOW = (1 << 62) - 1

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ms = 0
        self._rand_a = int.from_bytes(os.urandom(2), "big") & 0xFFF
        self._counter = int.from_bytes(os.urandom(8), "big") & self._LOW

    def many(self, n: int) -> list[uuid.UUID]:
        """``n`` ids in order; one clock read and one lock for the lot."""
        with self._lock:
            # Never go back, even if the clock does.
            self._ms = max(time.time_ns() // 1_000_000, self._ms)
            first = self._counter + 1
            self._counter = (self._counter + n) & self._LOW
            high = self._ms << 80 | self._VERSION | self._rand_a << 64 | self._VARIANT
        out = []
        new, setattr_, unknown = object.__new__, object.__setattr__, uuid.SafeUUID.unknown
        for k in range(first, first + n):
            # uuid.UUID(int=...) re-validates a value built to be valid; skipping
            # __init__ makes an id several times cheaper, which matters at 50k rows/s.
            u = new(uuid.UUID)
            setattr_(u, "int", high | (k & self._LOW))
            setattr_(u, "is_safe", unknown)
            out.append(u)
        return out

    def __call__(self) -> uuid.UUID:
        return self.many(1)[0]


uuid7 = _Uuid7()


def sample_to_row(host_id: uuid.UUID, s: GPUSample, row_id: uuid.UUID | None = None) -> Row | None:
    """The history row for one sample, or None when it cannot be stored.

    The seed's columns ``utilization``, ``memory_used`` and ``memory_total``
    are NOT NULL: a lost GPU, or one that refuses those fields, has nothing
    to record for that second (the live view still shows it as lost).
    """
    if s.lost or s.utilization is None or s.memory_used is None or s.memory_total is None:
        return None
    job_id = s.job_id
    return (
        row_id or uuid7(), s.timestamp, host_id, s.index, float(s.utilization),
        int(s.memory_used), int(s.memory_total), s.temperature, s.power_draw,
        job_id, s.job_type if job_id else None,
    )


def samples_to_rows(host_id: uuid.UUID, samples: list[GPUSample]) -> tuple[list[Row], int]:
    """Rows for the storable samples, and how many could not be stored."""
    ids = uuid7.many(len(samples))
    rows = [r for r in (sample_to_row(host_id, s, i) for s, i in zip(samples, ids, strict=True)) if r is not None]
    return rows, len(samples) - len(rows)


def copy_rows(engine: Engine, rows: list[Row]) -> None:
    """Write rows with one binary COPY in one transaction (PostgreSQL)."""
    raw = engine.raw_connection()
    conn = raw.driver_connection
    try:
        if conn is None:  # a connection the pool hands out is open
            raise RuntimeError("the pool gave a closed connection")
        with conn.cursor() as cur, cur.copy(COPY_SQL) as copy:
            copy.set_types(list(COPY_TYPES))
            for r in rows:
                copy.write_row(r)
        conn.commit()
    except BaseException:
        try:
            if conn is not None:
                conn.rollback()
        except Exception:  # noqa: BLE001 - the connection may be gone; the pool drops it
            raw.invalidate()
        raise
    finally:
        raw.close()


def insert_rows_ignoring_duplicates(engine: Engine, rows: list[Row]) -> None:
    """Insert rows, skipping any already stored (same host, GPU and timestamp)."""
    dicts = [dict(zip(COLUMNS, r, strict=True)) for r in rows]
    if engine.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        stmt: Insert = pg_insert(GPUMetricsHistory).on_conflict_do_nothing()
    else:
        stmt = sqlite_insert(GPUMetricsHistory).on_conflict_do_nothing()
    with engine.begin() as conn:
        conn.execute(stmt, dicts)


def write_rows(engine: Engine, rows: list[Row]) -> None:
    if not rows:
        return
    if engine.dialect.name != "postgresql":
        insert_rows_ignoring_duplicates(engine, rows)
        return
    try:
        copy_rows(engine, rows)
    except Exception as exc:
        import psycopg.errors

        # A batch whose COPY committed but whose acknowledgement was lost (the
        # server died in between) comes back as duplicates; keep what is new.
        if isinstance(exc, psycopg.errors.UniqueViolation) or isinstance(
            getattr(exc, "__cause__", None), psycopg.errors.UniqueViolation
        ):
            insert_rows_ignoring_duplicates(engine, rows)
        else:
            raise


@dataclass
class WriterStats:
    buffered: int = 0
    written_total: int = 0
    dropped_total: int = 0
    unstorable_total: int = 0
    failed_flushes: int = 0
    last_error: str | None = None
    last_write_at: datetime | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class MetricsWriter:
    """A bounded buffer of history rows and the loop that writes them."""

    def __init__(
        self,
        settings: StoreSettings,
        host_id: uuid.UUID,
        *,
        max_buffer: int = 200_000,
        batch_size: int = 10_000,
        engine: Engine | None = None,
    ) -> None:
        if max_buffer < 1 or batch_size < 1:
            raise ValueError("max_buffer and batch_size must be at least 1")
        self.settings = settings
        self.host_id = host_id
        self.max_buffer = max_buffer
        self.batch_size = batch_size
        self._engine = engine
        self._lock = threading.Lock()
        self._rows: deque[Row] = deque()
        self.stats = WriterStats()
        self._logged_drop_at = 0.0

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = engine_for(self.settings)
        return self._engine

    def add(self, samples: list[GPUSample]) -> None:
        rows, unstorable = samples_to_rows(self.host_id, samples)
        self.stats.unstorable_total += unstorable
        self.add_rows(rows)

    def add_rows(self, rows: list[Row]) -> None:
        with self._lock:
            self._rows.extend(rows)
            self._trim_locked()

    def _trim_locked(self) -> None:
        over = len(self._rows) - self.max_buffer
        if over > 0:
            for _ in range(over):
                self._rows.popleft()
            self.stats.dropped_total += over
            now = time.monotonic()
            # Once per 10 s at most: an outage must not flood the log.
            if now - self._logged_drop_at > 10:
                self._logged_drop_at = now
                log.warning(
                    "metrics buffer full (%d rows): dropped the oldest, %d dropped so far",
                    self.max_buffer, self.stats.dropped_total,
                )
        self.stats.buffered = len(self._rows)

    def _take(self) -> list[Row]:
        with self._lock:
            n = min(self.batch_size, len(self._rows))
            batch = [self._rows.popleft() for _ in range(n)]
            self.stats.buffered = len(self._rows)
            return batch

    def _put_back(self, batch: list[Row]) -> None:
        with self._lock:
            self._rows.extendleft(reversed(batch))
            self._trim_locked()

    def flush(self) -> int:
        """Write everything buffered now. Returns rows written; raises on a database error
        after putting the unwritten rows back."""
        written = 0
        while True:
            batch = self._take()
            if not batch:
                return written
            try:
                write_rows(self.engine, batch)
            except Exception as exc:
                self._put_back(batch)
                self.stats.failed_flushes += 1
                self.stats.last_error = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise
            written += len(batch)
            self.stats.written_total += len(batch)
            self.stats.last_write_at = datetime.now().astimezone()
            self.stats.last_error = None

    def run(self, stop: threading.Event, interval_s: float = 1.0) -> None:
        """Flush every ``interval_s``; back off up to 10 s while the database is down."""
        delay = interval_s
        while not stop.is_set():
            try:
                self.flush()
                delay = interval_s
            except Exception as exc:  # noqa: BLE001 - keep buffering; the database may come back
                log.warning("cannot write metrics (%d rows waiting): %s", self.stats.buffered,
                            self.stats.last_error or exc)
                delay = min(10.0, max(interval_s, delay * 2))
            stop.wait(delay)
        try:
            self.flush()
        except Exception:  # noqa: BLE001
            log.warning("stopping with %d metric rows unwritten", self.stats.buffered)
