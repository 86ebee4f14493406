"""What a chatty training's log costs the database: the shipper's batched pieces against a row per line.

A training writes ``--lines-per-s`` lines of ``--line-bytes`` bytes for
``--seconds`` into its log file while the host's shipper runs (a pass every
``GPUFLEET_LOG_SHIP_INTERVAL_S``, rows of at most ``GPUFLEET_LOG_CHUNK_BYTES``).
The baseline sends the same lines one row and one transaction each, as a
writer that ships every line as it is written would. Both run on a scratch
PostgreSQL database of the server given; the bench counts transactions,
rows and bytes through ``pg_stat_database`` and the table itself.

    python bench/log_shipping.py --database-url postgresql+psycopg://... [--lines-per-s 2000] [--seconds 10]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _scratch_db import scratch_settings
from sqlalchemy import func, select, text

from gpufleet.db.logchunks import TrainingLogChunk
from gpufleet.db.models import Training
from gpufleet.db.session import session_scope, write_session
from gpufleet.jobs.log_shipper import start_shipper
from gpufleet.jobs.logs import BoundedLog, log_path
from gpufleet.trainings import log_store


def _counters(settings) -> tuple[int, int]:
    with session_scope(settings) as s:
        row = s.execute(text("SELECT xact_commit, tup_inserted FROM pg_stat_database "
                             "WHERE datname = current_database()")).one()
    return int(row[0]), int(row[1])


def _training(settings) -> uuid.UUID:
    tid = uuid.uuid4()
    with session_scope(settings) as s:
        s.add(Training(id=tid, name=f"bench-{tid.hex[:6]}", owner="bench", recipe="mlp", config={}, status="running"))
    return tid


def _stored(settings, tid) -> tuple[int, int]:
    with session_scope(settings) as s:
        shipped = func.coalesce(func.sum(TrainingLogChunk.stop - TrainingLogChunk.start), 0)
        rows, size = s.execute(select(func.count(), shipped).where(TrainingLogChunk.training_id == tid)).one()
    return int(rows), int(size)


def _settle() -> None:
    time.sleep(1.0)  # pg_stat_database is updated by backends at most every PGSTAT_MIN_INTERVAL (1 s)


def shipped(settings, lines: list[bytes], per_s: int) -> tuple[int, int, int]:
    tid = _training(settings)
    stop = threading.Event()
    _settle()
    before = _counters(settings)
    thread = start_shipper(settings, stop)
    log = BoundedLog(log_path(settings, tid), settings.log_max_bytes)
    start = time.monotonic()
    for i, line in enumerate(lines):
        log.write(line)
        if (i + 1) % per_s == 0:
            time.sleep(max(0.0, start + (i + 1) / per_s - time.monotonic()))
    log.close()
    total = sum(len(x) for x in lines)
    while _stored(settings, tid)[1] < total:
        time.sleep(0.1)
    stop.set()
    thread.join(30)
    _settle()
    after = _counters(settings)
    return after[0] - before[0], _stored(settings, tid)[0], total


def row_per_line(settings, lines: list[bytes]) -> tuple[int, int, int]:
    tid = _training(settings)
    _settle()
    before = _counters(settings)
    at = 0
    for line in lines:
        with write_session(settings) as s:
            log_store.append(s, tid, "bench", [log_store.Piece(at, at + len(line), line)], settings.log_max_bytes)
        at += len(line)
    _settle()
    after = _counters(settings)
    return after[0] - before[0], _stored(settings, tid)[0], at


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--database-url", default=os.environ.get("GPUFLEET_TEST_DATABASE_URL"))
    ap.add_argument("--lines-per-s", type=int, default=2000)
    ap.add_argument("--line-bytes", type=int, default=100)
    ap.add_argument("--seconds", type=int, default=10)
    args = ap.parse_args()
    if not args.database_url:
        sys.exit("give --database-url (a PostgreSQL server) or set GPUFLEET_TEST_DATABASE_URL")
    n = args.lines_per_s * args.seconds
    lines = [f"[rank 0] step {i:08d} loss 0.1234 ".ljust(args.line_bytes - 1, "x").encode() + b"\n" for i in range(n)]
    with scratch_settings(args.database_url) as base, tempfile.TemporaryDirectory() as tmp:
        settings = base.model_copy(update={"data_dir": Path(tmp)})
        batched = shipped(settings, lines, args.lines_per_s)
        naive = row_per_line(settings, lines)
    mb = n * args.line_bytes / 1e6
    print(f"{n} lines, {mb:.1f} MB in {args.seconds} s ({args.lines_per_s} lines/s of {args.line_bytes} B); "
          f"interval {settings.log_ship_interval_s} s, rows <= {settings.log_chunk_bytes} B")
    for name, (xacts, rows, size) in (("shipper (batched)", batched), ("row per line", naive)):
        print(f"  {name:18s} transactions {xacts:7d} ({xacts / args.seconds:8.1f}/s)  rows {rows:7d} "
              f"({rows / args.seconds:8.1f}/s)  bytes stored {size}")
    print(f"ratio (row per line / batched): transactions {naive[0] / max(batched[0], 1):.0f}x, "
          f"rows {naive[1] / max(batched[1], 1):.0f}x")


if __name__ == "__main__":
    main()
