"""Shares of one GPU: 4 trainings as shares of one GPU against the same 4 one after another on it, and one
deliberate overrun beside two well-behaved shares, in one run.

Each arm runs on a fresh simulated fleet of one GPU (its own data dir, SQLite, the filesystem broker): the
server's scheduler loop in this process, one real Celery worker process, real launchers and ranks (CPU
ranks on a simulated GPU, whose NVML counts each rank's process as the context plus its real resident
memory, so a share too small for its process is really exceeded):

  shares        max_models_per_gpu 4: the 4 trainings run at once, each on a share of 16 GiB
  one-by-one    max_models_per_gpu 1: the baseline, the same 4 one after another on the same GPU
  overrun       3 at once: one whose share is the context + 200 MB (its process outgrows it once torch is
                loaded) beside two of 16 GiB; the watchdog stops it alone and requeues it

Throughput is steps (every training's, summed) over the wall time from the first training's creation
to the last one's end; the ratio is shares / one-by-one (above 1: sharing is faster). On simulated GPUs
the ranks run on this machine's CPUs, so the ratio shows what running at once saves (start-up, waits),
not what a real GPU's idle SMs would give. For the overrun: the neighbours' steps lost (steps each
was asked for and did not record, and attempts beyond its first: none expected) and what the overrun's
retry says.

    .venv/bin/python bench/share.py                 # 4 trainings of 60 steps
    .venv/bin/python bench/share.py --steps 10      # a quick look
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

from _localfleet import local_fleet
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import select

from gpufleet.api.routes import trainings
from gpufleet.config import load_settings
from gpufleet.db.models import TrainingEvent, TrainingMetric
from gpufleet.db.session import session_scope, upgrade_database
from gpufleet.jobs.worker import ensure_host

CONTEXT_MB = 300
FINAL = ("succeeded", "failed", "cancelled")


def _config(args: argparse.Namespace) -> dict:
    return {"max_steps": args.steps, "global_batch_size": 16, "checkpoint_every": max(1, args.steps // 3),
            "log_every": 1}


def _steps(s, tid: str) -> int:
    with session_scope(s) as sess:
        return len(set(sess.scalars(select(TrainingMetric.step).where(TrainingMetric.training_id == uuid.UUID(tid)))))


def _retry(s, tid: str) -> str | None:
    with session_scope(s) as sess:
        return sess.scalar(select(TrainingEvent.reason).where(TrainingEvent.training_id == uuid.UUID(tid),
                                                              TrainingEvent.kind == "retry"))


def run_arm(args: argparse.Namespace, label: str, items: list[dict], max_models: int) -> dict:
    data = Path(tempfile.mkdtemp(prefix=f"bench-share-{label}-"))
    s = load_settings(data_dir=data, simulate="1xH100-80GB", host_name=f"bench-{uuid.uuid4().hex[:6]}",
                      gpu={"max_models_per_gpu": max_models}, auth="off", create_rate_per_minute=10_000,
                      max_queued_per_user=10_000, sim_context_mb=CONTEXT_MB, warm_pool_size=0,
                      share_over_s=0.5, share_sample_s=0.2, stop_grace_s=30.0)
    upgrade_database(s)
    ensure_host(s)
    app = FastAPI()
    app.state.settings = s
    app.include_router(trainings.router)
    with local_fleet(s, data, 8):
        with TestClient(app) as c:
            r = c.post("/api/v1/trainings/batch", json={"items": items, "host": s.host_name})
            if r.status_code != 201:
                raise SystemExit(f"{label}: the batch was refused: {r.text}")
            ids = [t["id"] for t in r.json()["data"]]
            bodies = {}
            deadline = time.monotonic() + args.limit_s
            for tid in ids:
                while (b := c.get(f"/api/v1/trainings/{tid}").json())["status"] not in FINAL:
                    if time.monotonic() > deadline:
                        raise SystemExit(f"{label}: training {tid} did not end within {args.limit_s:.0f}s")
                    time.sleep(0.5)
                bodies[tid] = b
        began = min(datetime.fromisoformat(b["created_at"]) for b in bodies.values())
        ended = max(datetime.fromisoformat(b["finished_at"]) for b in bodies.values())
        wall = (ended - began).total_seconds()
        per = {bodies[t]["name"]: {"status": bodies[t]["status"], "attempt": bodies[t]["attempt"],
                                   "steps": _steps(s, t), "retry": _retry(s, t)} for t in ids}
    steps = sum(p["steps"] for p in per.values())
    return {"label": label, "wall_s": wall, "steps": steps, "steps_per_s": steps / wall if wall else 0.0, "per": per}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60, help="steps of each training")
    ap.add_argument("--limit-s", type=float, default=900.0, help="give up on an arm after this long")
    args = ap.parse_args()
    cfg = _config(args)
    four = [{"name": f"t{i}", "recipe": "sae", "config": cfg, "memory_mb": 16 * 1024} for i in range(4)]
    shared = run_arm(args, "shares", four, max_models=4)
    alone = run_arm(args, "one-by-one", four, max_models=1)
    for r in (shared, alone):
        print(f"  {r['label']:11s} wall {r['wall_s']:7.1f} s  steps {r['steps']:4d}  {r['steps_per_s']:6.2f} steps/s  "
              f"{ {k: v['status'] for k, v in r['per'].items()} }")
    ratio = shared["steps_per_s"] / alone["steps_per_s"]
    print(f"4 as shares of one GPU vs one after another: throughput {ratio:.2f}x")
    greedy = [{"name": "greedy", "recipe": "sae", "config": cfg, "memory_mb": CONTEXT_MB + 200}]
    calm = [{"name": f"calm{i}", "recipe": "sae", "config": cfg, "memory_mb": 16 * 1024} for i in range(2)]
    over = run_arm(args, "overrun", greedy + calm, max_models=3)
    lost = sum(max(0, args.steps - p["steps"]) + (p["attempt"] - 1)
               for k, p in over["per"].items() if k.startswith("calm"))
    g = over["per"]["greedy"]
    print(f"overrun beside two shares: neighbours {[over['per'][k]['status'] for k in ('calm0', 'calm1')]}, "
          f"neighbours' steps lost: {lost or 'none'}; the overrun ended {g['status']} after {g['attempt']} "
          f"attempt(s), {g['steps']} steps recorded")
    print(f"  its retry: {g['retry']}")


if __name__ == "__main__":
    main()
