"""The load one training across hosts puts on the fleet's services, at 2 and 4 simulated hosts.

For each fleet size N: N real ``gpufleet worker`` processes (agent on, as on a
GPU host: inventory, heartbeat, one GPU sample a second) with simulated GPUs,
one scheduler loop, one scratch PostgreSQL database and Redis. Measured twice
for ``--window`` seconds each: idle, then while one training runs across all
N hosts (one rank each). Printed per fleet size: PostgreSQL transactions/s,
rows written/s, Redis commands/s; then the per-host cost from the two sizes
and its extrapolation to 8 and 64 hosts (docs/scaling.md uses these).

    GPUFLEET_TEST_DATABASE_URL=postgresql+psycopg://... GPUFLEET_TEST_REDIS_URL=redis://... \\
        python bench/fleet_load.py [--window 15] [--sizes 2,4] [--idle-only 32]

``--idle-only N`` adds a fleet of N idle hosts (no training across them: N
ranks need more cores than a small machine has) and prints what the slope
of the first two sizes predicted for it.

The Redis instance should be this run's alone: its command count is global.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import redis
from sqlalchemy import select, text

sys.path.insert(0, str(Path(__file__).parent))
from _scratch_db import scratch_settings

from gpufleet.config import load_settings
from gpufleet.db.models import Host, Training
from gpufleet.db.session import session_scope
from gpufleet.jobs.embedded import settings_env, worker_command
from gpufleet.trainings import service
from gpufleet.wire.training_requests import TrainingCreate

CONFIG = {"in_features": 8, "hidden": [16], "out_features": 3, "task": "classification", "max_steps": 100000,
          "global_batch_size": 16, "log_every": 5, "checkpoint_every": 200}


def _counters(settings, r: redis.Redis) -> tuple[float, float, float]:
    with session_scope(settings) as sess:
        tx, rows = sess.execute(text(
            "SELECT xact_commit + xact_rollback, tup_inserted + tup_updated + tup_deleted"
            " FROM pg_stat_database WHERE datname = current_database()")).one()
    return float(tx), float(rows), float(r.info("stats")["total_commands_processed"])


def _window(settings, r: redis.Redis, seconds: float) -> tuple[float, float, float]:
    with session_scope(settings) as sess:
        sess.execute(text("SELECT pg_stat_clear_snapshot()"))
    a = _counters(settings, r)
    time.sleep(seconds)
    time.sleep(1.5)  # backends flush their statistics about once a second
    b = _counters(settings, r)
    return tuple((y - x) / (seconds + 1.5) for x, y in zip(a, b))  # type: ignore[return-value]


def measure(n: int, db_url: str, redis_url: str, window: float, training: bool = True) -> tuple[tuple, tuple | None]:
    from gpufleet.jobs.scheduler_loop import start as start_scheduler

    with scratch_settings(db_url) as scratch, tempfile.TemporaryDirectory(prefix="gpufleet-load-") as d:
        tmp = Path(d)
        hosts = [load_settings(database_url=scratch.database_url, redis_url=redis_url, data_dir=tmp / f"h{i}",
                               host_name=f"sim-{n}-{i}", simulate="2xH100-80GB", checkpoint_root=tmp / "shared",
                               advertise_address="127.0.0.1", network_interface="lo", auth="off")
                 for i in range(n)]
        r = redis.Redis.from_url(redis_url)
        procs = [subprocess.Popen(worker_command(s.host_name, agent=True) + ["--concurrency", "4"],
                                  env=settings_env(s), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for s in hosts]
        stop = threading.Event()
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                with session_scope(hosts[0]) as sess:
                    if len(sess.execute(select(Host.id)).all()) == n:
                        break
                time.sleep(0.5)
            start_scheduler(hosts[0], stop)
            time.sleep(3)
            idle = _window(hosts[0], r, window)
            print(f"{n} hosts  idle: {idle[0]:7.1f} PG tx/s {idle[1]:7.1f} rows/s {idle[2]:7.1f} Redis cmd/s",
                  flush=True)
            if not training:
                return idle, None
            with session_scope(hosts[0]) as sess:
                # The global batch divides among the n ranks (one per host).
                config = dict(CONFIG, global_batch_size=CONFIG["global_batch_size"] * max(1, n // 16))
                view = service.create(sess, hosts[0], TrainingCreate(
                    name="load", recipe="mlp", config=config, hosts=n, gpus_per_host=1), "bench")
                tid = view.training.id
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                with session_scope(hosts[0]) as sess:
                    t = sess.get(Training, tid)
                    if t.status == "running" and t.step >= 20:
                        break
                    if t.status in ("failed", "cancelled", "succeeded"):
                        raise SystemExit(f"the training ended: {t.status} {t.status_reason}")
                time.sleep(0.5)
            else:
                raise SystemExit("the training did not start within 300 s")
            running = _window(hosts[0], r, window)
            with session_scope(hosts[0]) as sess:
                service.cancel(sess, tid, "bench")
            deadline = time.monotonic() + 60  # every host's ranks stop before the workers go
            while time.monotonic() < deadline:
                with session_scope(hosts[0]) as sess:
                    if sess.get(Training, tid).status == "cancelled":
                        break
                time.sleep(0.5)
        finally:
            stop.set()
            for p in procs:
                p.kill()
                p.wait(10)
        return idle, running


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--window", type=float, default=15.0)
    ap.add_argument("--sizes", default="2,4")
    ap.add_argument("--idle-only", type=int, default=0, metavar="N",
                    help="also measure N idle hosts, with no training (a training across many hosts needs "
                         "more cores than a small machine has; the idle fleet does not)")
    args = ap.parse_args()
    db_url = os.environ["GPUFLEET_TEST_DATABASE_URL"]
    redis_url = os.environ["GPUFLEET_TEST_REDIS_URL"]
    results = {}
    for n in (int(x) for x in args.sizes.split(",")):
        results[n] = measure(n, db_url, redis_url, args.window)
        run = results[n][1]
        print(f"{n} hosts  training across all: {run[0]:7.1f} PG tx/s {run[1]:7.1f} rows/s {run[2]:7.1f} Redis cmd/s")
    if args.idle_only:
        n = args.idle_only
        idle, _ = measure(n, db_url, redis_url, args.window, training=False)
        if results:
            (n1, (i1, _r1)), (n2, (i2, _r2)) = sorted(results.items())[:2]
            slope = [(y - x) / (n2 - n1) for x, y in zip(i1, i2)]
            guess = [x + s * (n - n1) for x, s in zip(i1, slope)]
            print(f"{n} hosts idle, as the {n1}- and {n2}-host slope predicted: "
                  f"{guess[0]:7.1f} PG tx/s {guess[1]:7.1f} rows/s {guess[2]:7.1f} Redis cmd/s")
    if len(results) >= 2:
        (n1, (i1, r1)), (n2, (i2, r2)) = sorted(results.items())[:2]
        print(f"\nper host (slope between {n1} and {n2} hosts), and extrapolated:")
        print(f"{'':24}{'PG tx/s':>10}{'rows/s':>10}{'Redis/s':>10}")
        for label, a, b in (("idle", i1, i2), ("training across all", r1, r2)):
            slope = [(y - x) / (n2 - n1) for x, y in zip(a, b)]
            base = [x - s * n1 for x, s in zip(a, slope)]
            print(f"{label + ' per host':24}" + "".join(f"{s:10.1f}" for s in slope))
            for hosts in (8, 64):
                print(f"{label + f' at {hosts} hosts':24}" + "".join(f"{b0 + s * hosts:10.1f}"
                                                                      for b0, s in zip(base, slope)))


if __name__ == "__main__":
    main()
