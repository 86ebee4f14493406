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

Wall time is the sweep's start to its end. GPU-seconds are counted two ways, by the same rule for
every arm:

  GPU-s held    per GPU, the time at least one trial of the sweep held it (allocation to release),
                summed: the GPUs the sweep kept from everyone else, whoever shares them
  GPU-s share   per trial, its share of its GPU times the time it held it, summed: its share is the
                larger of its reservation's part of the GPU's memory and one of max_models_per_gpu
                places (the whole GPU when it holds it alone), so a trial stopped at a rung stops
                counting when it ends even while the others packed beside it run on

With --parallel at or above the trial count every trial starts at once: a stopped trial's place has
no trial of the sweep left to take it, so its GPU stays held by the others (a 'held' figure credits
no early stopping) while its share is free for other work. With --parallel below it the next trial
takes the place, and the sweep ends sooner.

For early stopping it also says how promptly the rungs were decided: the seconds from a trial's
report at a rung to the driver's verdict (median and slowest), and how many steps a stopped trial
ran past the rung that stopped it (its ranks wait there for the verdict: none).

Ratios are baseline / candidate (above 1: the candidate is better).

    .venv/bin/python bench/sweep.py                 # 32 trials on 4 simulated GPUs
    .venv/bin/python bench/sweep.py --steps 200 --min-steps 20 --lrs 4 --widths 2   # trials that matter
    .venv/bin/python bench/sweep.py --lrs 2 --widths 2 --steps 20   # a quick look
    .venv/bin/python bench/sweep.py --lrs 4 --widths 4 --steps 80 --min-steps 10 --parallel 8 --skip-one

A step's cost is set by --batch and --in-features (the synthetic task's size): on simulated GPUs the
ranks run on this machine's CPUs, so trials of a few cheap steps would measure only start-up.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

from _localfleet import local_fleet
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import select

from gpufleet.api.routes import sweeps
from gpufleet.config import load_settings
from gpufleet.db.models import GPU, GPUAllocation, Training, TrainingEvent, TrainingMetric
from gpufleet.db.sweeps import SweepTrial
from gpufleet.db.session import session_scope, upgrade_database
from gpufleet.db.types import utcnow
from gpufleet.jobs.worker import ensure_host
from gpufleet.sweeps import driver, rungs

ROUNDS: list[float] = []  # seconds each of the driver's rounds took, in this process
_advance = driver.advance


def _timed_advance(settings: object, sweep_id: uuid.UUID) -> int:  # driver.advance, timed
    began = time.monotonic()
    try:
        return _advance(settings, sweep_id)
    finally:
        ROUNDS.append(time.monotonic() - began)


driver.advance = _timed_advance


def _spec(args: argparse.Namespace, asha: str | None) -> dict:
    lrs = [round(0.0003 * (100 ** (i / max(1, args.lrs - 1))), 6) for i in range(args.lrs)]
    widths = [[w] for w in (8, 16, 32, 64, 128, 256)[: args.widths]]
    body = {"name": "bench", "recipe": "mlp", "parallel": args.parallel or args.lrs * args.widths, "seed": 0,
            "config": {"max_steps": args.steps, "global_batch_size": args.batch, "log_every": 5,
                       "checkpoint_every": 10_000, "synthetic_samples": 4 * args.batch,
                       "in_features": args.in_features, "task": "classification", "out_features": 4},
            "space": {"lr": lrs, "hidden": widths}, "method": "grid"}
    if asha:
        body["asha"] = {"min_steps": args.min_steps, "sync": asha == "sync"}
        if args.reduction_factor is not None:  # else gpufleet's default
            body["asha"]["reduction_factor"] = args.reduction_factor
    return body


def _held_seconds(rows: list) -> float:
    """Per GPU, the length of the union of its holding intervals; summed."""
    total = 0.0
    for gpu in {r.gpu_index for r in rows}:
        spans = sorted((r.allocated_at, r.released_at) for r in rows if r.gpu_index == gpu)
        start, end = spans[0]
        for s, e in spans[1:]:
            if s > end:
                total += (end - start).total_seconds()
                start, end = s, e
            else:
                end = max(end, e)
        total += (end - start).total_seconds()
    return total


def _share_seconds(rows: list, max_models: int) -> float:
    """Per allocation, its share of the GPU (memory reserved, or one of ``max_models`` places) x its time."""
    total = 0.0
    for r in rows:
        share = 1.0
        if not r.exclusive and max_models > 1:
            memory = (r.reserved_memory or 0) / r.memory_total if r.memory_total else 0.0
            share = min(1.0, max(memory, 1.0 / max_models))
        total += share * (r.released_at - r.allocated_at).total_seconds()
    return total


def _allocations(s, sid: uuid.UUID) -> list:
    """The sweep's GPU allocations, once the supervisors released the last (a moment after the sweep ends)."""
    deadline = time.monotonic() + 60
    while True:
        with session_scope(s) as sess:
            rows = sess.execute(select(GPUAllocation.gpu_index, GPUAllocation.allocated_at, GPUAllocation.released_at,
                                       GPUAllocation.exclusive, GPUAllocation.reserved_memory, GPU.memory_total)
                                .join(Training, Training.id == GPUAllocation.training_id)
                                .join(GPU, GPU.id == GPUAllocation.gpu_id)
                                .where(Training.sweep_id == sid)).all()
        if all(r.released_at is not None for r in rows) or time.monotonic() > deadline:
            now = utcnow()
            return [SimpleNamespace(**{**r._asdict(), "released_at": r.released_at or now}) for r in rows]
        time.sleep(0.5)


def _stops(s, sid: uuid.UUID, rung_at: list[int]) -> dict:
    """How promptly the rungs were decided: report-to-verdict seconds, steps a stopped trial ran past its rung."""
    with session_scope(s) as sess:
        events = sess.execute(select(TrainingEvent.training_id, TrainingEvent.time, TrainingEvent.data)
                              .join(Training, Training.id == TrainingEvent.training_id)
                              .where(Training.sweep_id == sid)).all()
        lags = []
        for tid, at, data in events:
            k = (data or {}).get("pruned_at_rung", (data or {}).get("promoted_at_rung"))
            if k is None or k >= len(rung_at):
                continue
            reported = sess.scalar(select(TrainingMetric.time).where(TrainingMetric.training_id == tid,
                                                                     TrainingMetric.step == rung_at[k]))
            if reported is not None:
                lags.append((at - reported).total_seconds())
        past = [step - rung for step, rung in sess.execute(
            select(Training.step, SweepTrial.metric_step).join(SweepTrial, SweepTrial.training_id == Training.id)
            .where(SweepTrial.sweep_id == sid, SweepTrial.state == "pruned"))]
        restarts = sum(sess.scalars(select(Training.restarts).where(Training.sweep_id == sid)))
    lags.sort()
    return {"verdicts": len(lags), "lag_median_s": lags[len(lags) // 2] if lags else None,
            "lag_max_s": lags[-1] if lags else None, "steps_past_rung": max(past, default=0), "restarts": restarts}


def run_sweep(args: argparse.Namespace, label: str, *, max_models: int, asha: str | None) -> dict:
    ROUNDS.clear()
    data = Path(tempfile.mkdtemp(prefix=f"bench-sweep-{label}-"))
    s = load_settings(data_dir=data, simulate=f"{args.gpus}xH100-80GB", host_name=f"bench-{uuid.uuid4().hex[:6]}",
                      gpu={"max_models_per_gpu": max_models}, auth="off", create_rate_per_minute=10_000,
                      max_queued_per_user=10_000)
    upgrade_database(s)
    ensure_host(s)
    app = FastAPI()
    app.state.settings = s
    app.include_router(sweeps.router)
    with local_fleet(s, data, 64):
        with TestClient(app) as c:
            sid = c.post("/api/v1/sweeps", json=_spec(args, asha)).json()["id"]
            while (body := c.get(f"/api/v1/sweeps/{sid}").json())["status"] == "running":
                time.sleep(1)
        rows = _allocations(s, uuid.UUID(sid))
        asha_spec = body["spec"].get("asha")
        rung_at = rungs.rung_steps(asha_spec["min_steps"], asha_spec.get("reduction_factor", 3), args.steps) \
            if asha_spec else []
        stops = _stops(s, uuid.UUID(sid), rung_at)
        took = sorted(ROUNDS)
        stops["rounds"] = (len(took), took[len(took) // 2] if took else 0.0, took[-1] if took else 0.0)
    from datetime import datetime

    wall = (datetime.fromisoformat(body["finished_at"]) - datetime.fromisoformat(body["created_at"])).total_seconds()
    best = body["best"]
    return {"label": label, "status": body["status"], "wall_s": wall, "held_s": _held_seconds(rows),
            "share_s": _share_seconds(rows, max_models), "stops": stops,
            "trials": body["trials_by_state"], "best": best["params"] if best else None,
            "best_metric": best["metric"] if best else None}


def _args() -> argparse.Namespace:
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
    ap.add_argument("--parallel", type=int, default=None, help="trials at once (default: every trial)")
    ap.add_argument("--sync", action="store_true", help="also run synchronous halving (asha-sync)")
    ap.add_argument("--skip-one", action="store_true", help="leave out the one-per-GPU baseline (packed vs ASHA only)")
    return ap.parse_args()


def _line(r: dict) -> str:
    st = r["stops"]
    said = (f"  {r['label']:12s} {r['status']:9s} wall {r['wall_s']:7.1f} s  GPU-s held {r['held_s']:8.1f}  "
            f"GPU-s share {r['share_s']:7.1f}  trials {r['trials']}  best {r['best']} ({r['best_metric']:.4g})")
    if st["verdicts"]:
        said += (f"\n{'':16s}rung verdicts {st['verdicts']}: {st['lag_median_s']:.2f} s after the report (median), "
                 f"{st['lag_max_s']:.2f} s at most; steps a stopped trial ran past its rung: at most "
                 f"{st['steps_past_rung']}")
    said += "\n{:16s}driver rounds {}: {:.2f} s (median), {:.2f} s at most".format("", *st["rounds"])
    return said + (f"; {st['restarts']} restart(s) (lost leases: a loaded machine)" if st["restarts"] else "")


def main() -> None:
    args = _args()
    n = args.lrs * args.widths
    print(f"{n} trials of {args.steps} steps on {args.gpus} simulated GPUs, {min(args.parallel or n, n)} at once "
          f"(batch {args.batch}, {args.in_features} features); load average {_load()}")
    plan = [] if args.skip_one else [("one-per-gpu", 1, None)]
    plan += [("packed", 8, None), ("asha", 8, "async")] + ([("asha-sync", 8, "sync")] if args.sync else [])
    runs = {k: run_sweep(args, k, max_models=m, asha=a) for k, m, a in plan}
    for r in runs.values():
        print(_line(r))
    packed = runs["packed"]
    if "one-per-gpu" in runs:
        one = runs["one-per-gpu"]
        print(f"packed vs one per GPU: wall {one['wall_s'] / packed['wall_s']:.2f}x faster, GPU-seconds held "
              f"{one['held_s'] / packed['held_s']:.2f}x fewer, "
              f"by share {one['share_s'] / packed['share_s']:.2f}x fewer")
    for key, name in (("asha", "ASHA (async)"), ("asha-sync", "ASHA (sync)")):
        if key in runs:
            a = runs[key]
            print(f"{name} vs full grid (both packed): wall {packed['wall_s'] / a['wall_s']:.2f}x faster, GPU-seconds "
                  f"held {packed['held_s'] / a['held_s']:.2f}x fewer, by share {packed['share_s'] / a['share_s']:.2f}x "
                  f"fewer; reaches the grid's best configuration: {'yes' if a['best'] == packed['best'] else 'no'} "
                  f"(grid {packed['best']}, {key} {a['best']})")
    print(f"load average at the end {_load()}")


def _load() -> str:
    import os

    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
