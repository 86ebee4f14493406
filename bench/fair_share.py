"""Fair share: two users, 20 one-GPU trainings each, a simulated 4-GPU host.

    .venv/bin/python bench/fair_share.py [--url postgresql+psycopg://...] [--bob-share 1] [--seconds 2]

What runs: the product's scheduler pass (``schedule_pending``) against a real
database (a fresh SQLite file, or a fresh PostgreSQL database with --url), on
a host registered by the real inventory code from a simulated 4xH100 fleet.
Completion is simulated: no worker runs; a placed training "runs" for its
drawn duration (wall-clock seconds, the same draws for both orders) and is
then ended through the lifecycle's compare-and-set, which releases its GPUs
as a real ending does. GPU time is read back from the allocations with the
product's usage accounting.

Alice submits her 20 trainings first, then Bob his 20. The run is measured
over the contended window: from the first placement until either user has
nothing left queued (after that there is nothing to share). Printed for both
orders, in the same run, on the same draws:

- baseline: plain priority-then-age (``fair_share=False``);
- fair share: priority, then the Slurm-style fair-share factor, then age.

For each: GPU-seconds each user received, the share they were due, and the
deviation |received/total - due| / due. Goal: the fair-share order within 10%.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpufleet.config import Settings, load_settings
from gpufleet.db.models import Training
from gpufleet.db.session import get_engine, session_scope, upgrade_database
from gpufleet.db.types import utcnow
from gpufleet.lifecycle.transitions import transition
from gpufleet.scheduling.scheduler import schedule_pending
from gpufleet.users.accounts import add_user
from gpufleet.users.groups import Limits, set_user_quota
from gpufleet.users.usage import held_seconds

PER_USER = 20
GPUS = 4
TICK_S = 0.02


@dataclass
class Outcome:
    received: dict[str, float]
    window_s: float


def _settings(tmp: Path, url: str | None, stack: ExitStack, fair: bool, half_life_s: float) -> Settings:
    kw = dict(simulate=f"{GPUS}xH100-80GB", simulate_topology="nvlink-all", host_name="bench-" + uuid.uuid4().hex[:6],
              fair_share=fair, fair_share_half_life_h=half_life_s / 3600.0, max_queued_per_user=1000)
    if url:
        from _scratch_db import scratch_settings

        base = stack.enter_context(scratch_settings(url))
        return base.model_copy(update={**kw, "data_dir": tmp})
    s = load_settings(data_dir=tmp, **kw)
    upgrade_database(s)
    return s


def _prepare(s: Settings, shares: dict[str, float]) -> None:
    from gpufleet.devices.backend import device_backend
    from gpufleet.telemetry.inventory import register_host
    from gpufleet.telemetry.live import LOCAL
    from gpufleet.telemetry.sampler import NvmlSampler

    register_host(s)
    sampler = NvmlSampler(s, s, device_backend(s))
    try:
        LOCAL.put_host(s.host_name, sampler.sample())
    finally:
        sampler.close()
    with session_scope(s) as sess:
        for name, share in shares.items():
            add_user(sess, name)
            set_user_quota(sess, name, Limits(share=share))


def _submit(s: Settings, owners: list[str]) -> None:
    from gpufleet.wire.training_requests import TrainingCreate
    from gpufleet.trainings.service import create_trainings

    for owner in owners:  # Alice's all first, then Bob's: Alice's are the older ones
        with session_scope(s) as sess:
            create_trainings(sess, s, [TrainingCreate(name=f"{owner}-{i}", recipe="mlp",
                                                      config={"global_batch_size": 8}, host=s.host_name)
                                       for i in range(PER_USER)], owner)


def _queued_owners(s: Settings) -> set[str]:
    from sqlalchemy import select

    with session_scope(s) as sess:
        return set(sess.scalars(select(Training.owner).where(Training.status == "queued").distinct()))


def run_order(s: Settings, owners: list[str], durations: dict[str, list[float]]) -> Outcome:
    from sqlalchemy import select

    with session_scope(s) as sess:
        names = {t.id: (t.owner, int(t.name.rsplit("-", 1)[1])) for t in sess.scalars(select(Training))}
    ends: dict[uuid.UUID, float] = {}
    start: datetime | None = None
    while True:
        result = schedule_pending(s)
        now = time.monotonic()
        for tid, _host in result.scheduled:
            owner, i = names[tid]
            ends[tid] = now + durations[owner][i]
            start = start or utcnow()
        if start is not None and _queued_owners(s) != set(owners):
            stop = utcnow()
            break
        time.sleep(TICK_S)
        now = time.monotonic()
        for tid in [t for t, e in ends.items() if e <= now]:
            with session_scope(s) as sess:
                transition(sess, tid, ("scheduled", "running"), "succeeded", reason="simulated completion")
            del ends[tid]
    with session_scope(s) as sess:
        usage = held_seconds(sess, start, stop, stop)
    received = {o: sum(u.held for u in usage.values() if u.owner == o) for o in owners}
    for tid in list(ends):  # end the rest so the database is left quiet
        with session_scope(s) as sess:
            transition(sess, tid, ("scheduled", "running"), "cancelled", reason="bench over")
    return Outcome(received, (stop - start).total_seconds())


def _report(label: str, out: Outcome, shares: dict[str, float]) -> float:
    total = sum(out.received.values()) or 1.0
    due_total = sum(shares.values())
    worst = 0.0
    print(f"{label}: contended window {out.window_s:.1f} s")
    for owner, got in out.received.items():
        due = shares[owner] / due_total
        dev = abs(got / total - due) / due
        worst = max(worst, dev)
        print(f"  {owner:6s} received {got:8.1f} GPU-s = {got / total:6.1%} of the GPU time; "
              f"share {due:6.1%}; deviation {dev:6.1%}")
    return worst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default=os.environ.get("GPUFLEET_BENCH_DATABASE_URL"),
                    help="a PostgreSQL server URL (default: a fresh SQLite file)")
    ap.add_argument("--bob-share", type=float, default=1.0, help="Bob's fair-share weight (Alice has 1)")
    ap.add_argument("--seconds", type=float, default=2.0, help="mean simulated run time of a training")
    ap.add_argument("--half-life", type=float, default=8.0, help="fair-share half-life in seconds")
    ap.add_argument("--seed", type=int, default=18)
    args = ap.parse_args()
    owners = ["alice", "bob"]
    shares = {"alice": 1.0, "bob": args.bob_share}
    rng = random.Random(args.seed)
    durations = {o: [rng.uniform(0.5, 1.5) * args.seconds for _ in range(PER_USER)] for o in owners}
    results = {}
    for label, fair in (("baseline (priority, then age)", False), ("fair share (priority, factor, age)", True)):
        with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
            s = _settings(Path(tmp), args.url, stack, fair, args.half_life)
            _prepare(s, shares)
            _submit(s, owners)
            out = run_order(s, owners, durations)
            results[label] = _report(label, out, shares)
            get_engine.cache_clear()
    base, fair = results.values()
    print(f"worst deviation from the shares: baseline {base:.1%}, fair share {fair:.1%}; "
          f"ratio baseline/fair share {base / max(fair, 1e-9):.1f}x")
    print("goal (within 10% of the shares):", "met" if fair <= 0.10 else "NOT met")


if __name__ == "__main__":
    main()
