"""History query: 24 h of 8 GPUs at 1 Hz (691,200 rows), 1,000 points per GPU, on PostgreSQL.

    eval "$(bash .ci/services.sh start /tmp/gpufleet-services)"
    .venv/bin/python bench/history_query.py [--url postgresql+psycopg://...] [--hours 24] [--rounds 7]

Compares, in one run on one fresh database:
- baseline: fetch every raw row of the range and bucket in Python (what a
  client-side chart does without database bucketing);
- raw: ``query_history(source="raw")``, ``date_bin`` over the raw samples;
- auto: ``query_history()`` as the endpoint calls it (minute rollups for the
  rolled-up part of the range, raw samples for the rest).
Goal: under 100 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from datetime import datetime, timedelta, timezone

from sqlalchemy import text

from _scratch_db import scratch_settings
from gpufleet.db.models import Host
from gpufleet.db.session import get_engine, session_scope
from gpufleet.telemetry import retention
from gpufleet.telemetry.history import HistoryQuery, query_history
from gpufleet.telemetry.storage import copy_rows, uuid7

GPUS, POINTS = 8, 1000


def timed(fn, n):
    fn()  # warm the cache and the plan
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default=os.environ.get("GPUFLEET_TEST_DATABASE_URL"))
    ap.add_argument("--hours", type=int, default=24, help="hours of history loaded (the goal is for 24)")
    ap.add_argument("--rounds", type=int, default=7, help="timed runs of each query (the baseline: under half)")
    args = ap.parse_args()
    seconds = args.hours * 3600
    if not args.url:
        raise SystemExit("set GPUFLEET_TEST_DATABASE_URL or pass --url (a PostgreSQL server)")
    with scratch_settings(args.url) as settings:
        engine = get_engine(settings.effective_database_url)
        end = datetime.now(timezone.utc).replace(second=0, microsecond=0)
        start = end - timedelta(seconds=seconds)
        retention.ensure_partitions(engine, today=start.date(), days_ahead=1)
        with session_scope(settings) as sess:
            host = Host(name="bench-host")
            sess.add(host)
            sess.flush()
            host_id = host.id
        t0 = time.perf_counter()
        for chunk in range(0, seconds, 3600):
            rows = []
            ids = iter(uuid7.many(3600 * GPUS))
            for t in range(chunk, chunk + 3600):
                ts = start + timedelta(seconds=t)
                for g in range(GPUS):
                    rows.append((next(ids), ts, host_id, g, float((t + g) % 100), t * 1000, 80 << 30,
                                 50.0 + g, 300.0, None, None))
            copy_rows(engine, rows)
        # What the agent's maintenance does as the day goes by.
        retention.rollup(engine, start, end)
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
            c.execute(text("VACUUM ANALYZE gpu_metrics_history"))
            c.execute(text("VACUUM ANALYZE gpu_metrics_rollup"))
            n = c.execute(text("SELECT count(*) FROM gpu_metrics_history")).scalar()
        print(f"loaded {n:,} rows ({GPUS} GPUs x {args.hours} h at 1 Hz) in {time.perf_counter() - t0:.1f} s")

        def baseline():
            step = seconds / POINTS
            buckets: dict[tuple[int, int], list[float]] = {}
            with engine.connect() as c:
                for g, ts, u in c.execute(text(
                        'SELECT gpu_index, "timestamp", utilization FROM gpu_metrics_history '
                        'WHERE "timestamp" >= :a AND "timestamp" < :b'), {"a": start, "b": end}):
                    b = buckets.setdefault((g, int((ts - start).total_seconds() // step)), [])
                    b.append(u)
            return {k: (min(v), sum(v) / len(v), max(v)) for k, v in buckets.items()}

        q_raw = HistoryQuery(start=start, end=end, points=POINTS, source="raw")
        q_auto = HistoryQuery(start=start, end=end, points=POINTS)
        b_med, b_min, b_out = timed(baseline, n=max(1, args.rounds // 2))
        r_med, r_min, r_out = timed(lambda: query_history(settings, settings, q_raw, engine=engine), args.rounds)
        a_med, a_min, a_out = timed(lambda: query_history(settings, settings, q_auto, engine=engine), args.rounds)
        from fastapi import FastAPI
        from fastapi.testclient import TestClient

        from gpufleet.api.routes.metrics import router

        app = FastAPI()  # the route alone: authentication has its own benchmark
        app.state.settings = settings
        app.include_router(router)
        http = TestClient(app)
        params = {"from": start.isoformat(), "to": end.isoformat(), "points": POINTS}
        h_med, h_min, h_out = timed(lambda: http.get("/api/v1/system/metrics/history", params=params), args.rounds)
        assert h_out.status_code == 200, h_out.text
        print(f"load average:  {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        print(f"baseline (all rows, bucket in Python): {b_med * 1000:8.1f} ms median  ({len(b_out)} buckets)")
        print(f"raw date_bin in the database:          {r_med * 1000:8.1f} ms median, {r_min * 1000:.1f} best "
              f"({len(r_out.series)} GPUs x {len(r_out.series[0].points)} points, step {r_out.step_s:.0f} s)")
        print(f"auto (endpoint: rollups + raw tail):   {a_med * 1000:8.1f} ms median, {a_min * 1000:.1f} best "
              f"({len(a_out.series)} GPUs x {len(a_out.series[0].points)} points, step {a_out.step_s:.0f} s, "
              f"{a_out.source})")
        print(f"GET /api/v1/system/metrics/history: {h_med * 1000:8.1f} ms median, {h_min * 1000:.1f} best "
              f"({len(h_out.content) / 1024:.0f} KiB of JSON)")
        print(f"speed-up vs baseline: raw {b_med / r_med:.1f}x, auto {b_med / a_med:.1f}x")
        print(f"goal < 100 ms: {'met' if a_med < 0.1 else 'NOT met'} (auto, median, {args.hours} h)")


if __name__ == "__main__":
    main()
