"""Sweeps: trials packed several to a GPU by their memory estimate versus one trial per GPU, and early
stopping (ASHA) versus the full grid, each pair in one run.

Each sweep runs on a fresh simulated fleet (its own data dir, SQLite, the filesystem broker): the
server's scheduler loop in this process (it drives sweeps), one real Celery worker process, real
launchers and ranks (CPU ranks on simulated GPUs). The same grid of MLP trials runs three ways:

  packed     max_models_per_gpu 8: trials share a GPU while their estimates fit
  one/GPU    max_models_per_gpu 1: the baseline, one trial per GPU
  asha       packed, asynchronous successive halving with rungs at --min-steps, x2, ...: each trial is
             judged as it reports a rung and stopped there or left running (no restart)
  asha-sync  (with --sync) packed, synchronous halving: every trial stops at each rung, waits for the
             others, and the promoted ones resume from their checkpoints

Wall time is the sweep's start to its end; GPU-seconds sum, per GPU, the time at least one trial
held it (allocation to release). Ratios are baseline / candidate (above 1: the candidate is better).

    .venv/bin/python bench/sweep.py                 # 32 trials on 4 simulated GPUs
    .venv/bin/python bench/sweep.py --steps 200 --min-steps 20 --lrs 4 --widths 2   # trials that matter
    .venv/bin/python bench/sweep.py --lrs 2 --widths 2 --steps 20   # a quick look

A step's cost is set by --batch and --in-features (the synthetic task's size): on simulated GPUs the
ranks run on this machine's CPUs, so trials of a few cheap steps would measure only start-up.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from gpufleet.api.routes import sweeps
from gpufleet.config import load_settings
from gpufleet.db.models import GPUAllocation, Host, Training
from gpufleet.db.session import session_scope, upgrade_database, write_session
from gpufleet.db.types import utcnow
from gpufleet.jobs.embedded import settings_env, worker_command
from gpufleet.jobs.scheduler_loop import start as start_loop
from gpufleet.jobs.worker import ensure_host


def _spec(args: argparse.Namespace, asha: str | None) -> dict:
    lrs = [round(0.0003 * (100 ** (i / max(1, args.lrs - 1))), 6) for i in range(args.lrs)]
    widths = [[w] for w in (8, 16, 32, 64, 128, 256)[: args.widths]]
    body = {"name": "bench", "recipe": "mlp", "parallel": args.lrs * args.widths, "seed": 0,
            "config": {"max_steps": args.steps, "global_batch_size": args.batch, "log_every": 5,
                       "checkpoint_every": 10_000, "synthetic_samples": 4 * args.batch,
                       "in_features": args.in_features, "task": "classification", "out_features": 4},
            "space": {"lr": lrs, "hidden": widths}, "method": "grid"}
    if asha:
        body["asha"] = {"min_steps": args.min_steps, "sync": asha == "sync"}
        if args.reduction_factor is not None:  # else gpufleet's default
            body["asha"]["reduction_factor"] = args.reduction_factor
    return body


def _gpu_seconds(rows: list[tuple]) -> float:
    """Per GPU, the length of the union of its holding intervals; summed."""
    total = 0.0
    for gpu in {r[0] for r in rows}:
        spans = sorted((r[1], r[2]) for r in rows if r[0] == gpu)
        start, end = spans[0]
        for s, e in spans[1:]:
            if s > end:
                total += (end - start).total_seconds()
                start, end = s, e
            else:
                end = max(end, e)
        total += (end - start).total_seconds()
    return total


def run_sweep(args: argparse.Namespace, label: str, *, max_models: int, asha: str | None) -> dict:
    data = Path(tempfile.mkdtemp(prefix=f"bench-sweep-{label}-"))
    s = load_settings(data_dir=data, simulate=f"{args.gpus}xH100-80GB", host_name=f"bench-{uuid.uuid4().hex[:6]}",
                      gpu={"max_models_per_gpu": max_models}, auth="off", create_rate_per_minute=10_000,
                      max_queued_per_user=10_000)
    upgrade_database(s)
    ensure_host(s)
    log = open(data / "worker.log", "ab")  # noqa: SIM115
    worker = subprocess.Popen(worker_command(s.host_name, agent=False) + ["--concurrency", "64"],
                              env=settings_env(s), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    stop = threading.Event()
    loop = start_loop(s, stop)

    def beat() -> None:  # the worker runs without its agent: keep the host online
        while not stop.wait(5):
            try:
                with write_session(s) as sess:
                    sess.execute(update(Host).where(Host.name == s.host_name).values(last_heartbeat=utcnow()))
            except Exception:  # noqa: BLE001 - a busy database: the next beat comes in 5 s
                pass

    threading.Thread(target=beat, daemon=True).start()
    app = FastAPI()
    app.state.settings = s
    app.include_router(sweeps.router)
    try:
        with TestClient(app) as c:
            sid = c.post("/api/v1/sweeps", json=_spec(args, asha)).json()["id"]
            while (body := c.get(f"/api/v1/sweeps/{sid}").json())["status"] == "running":
                time.sleep(1)
        with session_scope(s) as sess:
            rows = sess.execute(select(GPUAllocation.gpu_index, GPUAllocation.allocated_at, GPUAllocation.released_at)
                                .join(Training, Training.id == GPUAllocation.training_id)
                                .where(Training.sweep_id == uuid.UUID(sid))).all()
    finally:
        stop.set()
        loop.join(30)
        worker.kill()
        worker.wait()
    from datetime import datetime

    wall = (datetime.fromisoformat(body["finished_at"]) - datetime.fromisoformat(body["created_at"])).total_seconds()
    best = body["best"]
    return {"label": label, "status": body["status"], "wall_s": wall, "gpu_s": _gpu_seconds(rows),
            "trials": body["trials_by_state"], "best": best["params"] if best else None,
            "best_metric": best["metric"] if best else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=4)
    ap.add_argument("--lrs", type=int, default=8, help="learning rates in the grid")
    ap.add_argument("--widths", type=int, default=4, help="hidden widths in the grid (trials = lrs x widths)")
    ap.add_argument("--steps", type=int, default=40, help="steps of a whole trial")
    ap.add_argument("--min-steps", type=int, default=10, help="ASHA's first rung")
    ap.add_argument("--batch", type=int, default=32, help="a step's batch (its cost on the CPU)")
    ap.add_argument("--in-features", type=int, default=16, help="input columns of the synthetic task")
    ap.add_argument("--reduction-factor", type=int, default=None,
                    help="ASHA's reduction factor: 1 in this many trials goes on at each rung (default: gpufleet's, 3)")
    ap.add_argument("--sync", action="store_true", help="also run synchronous halving (asha-sync)")
    args = ap.parse_args()
    print(f"{args.lrs * args.widths} trials of {args.steps} steps on {args.gpus} simulated GPUs "
          f"(batch {args.batch}, {args.in_features} features); load average {_load()}")
    plan = [("one-per-gpu", 1, None), ("packed", 8, None), ("asha", 8, "async")]
    plan += [("asha-sync", 8, "sync")] if args.sync else []
    runs = {k: run_sweep(args, k, max_models=m, asha=a) for k, m, a in plan}
    for r in runs.values():
        print(f"  {r['label']:12s} {r['status']:9s} wall {r['wall_s']:7.1f} s  GPU-seconds {r['gpu_s']:8.1f}  "
              f"trials {r['trials']}  best {r['best']} ({r['best_metric']:.4g})")
    one, packed = runs["one-per-gpu"], runs["packed"]
    print(f"packed vs one per GPU: wall {one['wall_s'] / packed['wall_s']:.2f}x faster, "
          f"GPU-seconds {one['gpu_s'] / packed['gpu_s']:.2f}x fewer")
    for key, name in (("asha", "ASHA (async)"), ("asha-sync", "ASHA (sync)")):
        if key in runs:
            a = runs[key]
            print(f"{name} vs full grid (both packed): wall {packed['wall_s'] / a['wall_s']:.2f}x faster, "
                  f"GPU-seconds {packed['gpu_s'] / a['gpu_s']:.2f}x fewer; reaches the grid's best configuration: "
                  f"{'yes' if a['best'] == packed['best'] else 'no'} (grid {packed['best']}, {key} {a['best']})")
    print(f"load average at the end {_load()}")


def _load() -> str:
    import os

    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
