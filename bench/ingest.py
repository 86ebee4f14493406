"""Ingest throughput: the telemetry storage path vs a bare COPY of the same rows, same table, same run.

    eval "$(bash .ci/services.sh start /tmp/gpufleet-services)"
    .venv/bin/python bench/ingest.py [--rows 200000] [--repeat 3] [--url postgresql+psycopg://...]

The storage path is what the agent runs: GPUSample objects -> MetricsWriter.add
(rows into the bounded buffer) -> flush (binary COPY in batches of 10,000, one
transaction each). The baseline is one binary COPY of pre-built row tuples.
Both write into gpu_metrics_history (its daily partition) of a fresh database.
Goals: ratio >= 0.5 and >= 50,000 rows/s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from datetime import datetime, timedelta, timezone

from sqlalchemy import text

from _scratch_db import scratch_settings
from gpufleet.db.session import get_engine
from gpufleet.telemetry.retention import ensure_partitions
from gpufleet.telemetry.sample import GPUSample
from gpufleet.telemetry.storage import MetricsWriter, copy_rows, sample_to_row


def samples(host: str, start: datetime, n_rows: int, gpus: int = 8) -> list[GPUSample]:
    out = []
    for t in range(n_rows // gpus):
        ts = start + timedelta(seconds=t)
        for i in range(gpus):
            out.append(GPUSample(host=host, index=i, timestamp=ts, utilization=float(t % 100),
                                 memory_used=t * 1000 + i, memory_total=80 * 2**30, temperature=60.0,
                                 power_draw=300.0 + i))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--url", default=os.environ.get("GPUFLEET_TEST_DATABASE_URL"))
    args = ap.parse_args()
    if not args.url:
        raise SystemExit("set GPUFLEET_TEST_DATABASE_URL or pass --url (a PostgreSQL server)")
    with scratch_settings(args.url) as settings:
        engine = get_engine(settings.effective_database_url)
        start = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
        ensure_partitions(engine, today=start.date(), days_ahead=(args.rows // 8) // 86400 + 1)

        copy_times, path_times = [], []
        # Alternate the two, so that a table growing between runs or a burst
        # of load from elsewhere on this shared machine hurts both alike.
        for _ in range(args.repeat):
            base_rows = [sample_to_row(uuid.uuid4(), s) for s in samples("b", start, args.rows)]
            t0 = time.perf_counter()
            copy_rows(engine, base_rows)
            copy_times.append(time.perf_counter() - t0)
            del base_rows

            path_samples = samples("p", start, args.rows)
            writer = MetricsWriter(settings, uuid.uuid4(), max_buffer=args.rows + 1)
            t0 = time.perf_counter()
            # The agent hands over one round (all GPUs of a host) at a time.
            for i in range(0, len(path_samples), 8):
                writer.add(path_samples[i:i + 8])
            writer.flush()
            path_times.append(time.perf_counter() - t0)
            del path_samples
        with engine.connect() as c:
            stored = c.execute(text("SELECT count(*) FROM gpu_metrics_history")).scalar()
        assert stored == 2 * args.rows * args.repeat, stored
        copy_rate, path_rate = args.rows / min(copy_times), args.rows / min(path_times)
        med = statistics.median(path_times) / statistics.median(copy_times)
        print(f"rows per run:          {args.rows} x {args.repeat} runs each (best run shown)")
        print(f"load average:          {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        print(f"bare COPY:             {copy_rate:>10,.0f} rows/s")
        print(f"storage path:          {path_rate:>10,.0f} rows/s")
        print(f"ratio path/COPY:       {path_rate / copy_rate:.2f} best, {1 / med:.2f} median  (goal >= 0.5)")
        print(f"goal >= 50,000 rows/s: {'met' if path_rate >= 50_000 else 'NOT met'}")


if __name__ == "__main__":
    main()
