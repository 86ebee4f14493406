"""Samples/s of one training across 2 hosts × 2 ranks against 1 host × 4 ranks.

Same model (the ``mlp`` recipe), same data, same global batch, same steps.
Both layouts run through gpufleet's launcher (``python -m
gpufleet.engine.launch``): the one-host run as one launcher with four ranks;
the across-hosts run as two launchers, one per "host", the first opening the
c10d TCPStore that every rank joins as a client, gloo over the loopback
interface (``GLOO_SOCKET_IFNAME=lo``), exactly as two workers start them. The
layouts alternate round by round so load from elsewhere on the machine hits
both alike; the medians are printed side by side with their ratio.

On one CPU machine this measures the overhead of the cross-host path (the
external store, two launchers, socket set-up), not a network: docs/scaling.md
works out what a real network adds.

    python bench/multi_host.py [--steps 120] [--rounds 3] [--warmup 20]

Throughput is read from the launcher's progress lines after a warm-up, so
process start-up, imports and the rendezvous are not counted.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from gpufleet.engine.spec import LaunchSpec

CONFIG = dict(in_features=64, hidden=[256, 256], out_features=64, task="regression", synthetic_samples=65536,
              global_batch_size=256, lr=1e-3, log_every=10, checkpoint_every=10**9)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict[str, str]:
    return {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_WAIT_POLICY": "PASSIVE", "PYTHONUNBUFFERED": "1"}


def _start(spec: LaunchSpec, path: Path) -> subprocess.Popen:
    spec.write(path)
    return subprocess.Popen([sys.executable, "-m", "gpufleet.engine.launch", str(path)], env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _rate(progress: Path, batch: int, warmup: int) -> float:
    steps = [json.loads(x) for x in progress.read_text().splitlines() if '"type": "step"' in x]
    steps = [s for s in steps if s["step"] >= warmup]
    if len(steps) < 2:
        raise SystemExit(f"too few steps reported in {progress}: run more than --warmup + {CONFIG['log_every']}")
    return batch * (steps[-1]["step"] - steps[0]["step"]) / (steps[-1]["time"] - steps[0]["time"])


def one_host(tmp: Path, steps: int, warmup: int) -> float:
    cfg = {**CONFIG, "max_steps": steps}
    spec = LaunchSpec(recipe="mlp", config=cfg, devices=["cpu"] * 4, checkpoint_dir=str(tmp / "ckpt-1"),
                      progress_file=str(tmp / "one.jsonl"), resume=False)
    p = _start(spec, tmp / "one.json")
    _, err = p.communicate()
    if p.returncode != 0:
        raise SystemExit(f"one-host run failed: {err[-2000:]}")
    return _rate(tmp / "one.jsonl", cfg["global_batch_size"], warmup)


def two_hosts(tmp: Path, steps: int, warmup: int) -> float:
    cfg = {**CONFIG, "max_steps": steps}
    port = _free_port()
    procs = []
    for host, first in (("a", 0), ("b", 2)):
        gang = {"world_size": 4, "first_rank": first, "master_addr": "127.0.0.1", "master_port": port,
                "store_master": first == 0, "rendezvous_timeout_s": 120}
        spec = LaunchSpec(recipe="mlp", config=cfg, devices=["cpu"] * 2, checkpoint_dir=str(tmp / "ckpt-2"),
                          progress_file=str(tmp / f"two-{host}.jsonl"), resume=False, gang=gang)
        procs.append(_start(spec, tmp / f"two-{host}.json"))
    for p in procs:
        _, err = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"two-host run failed: {err[-2000:]}")
    return _rate(tmp / "two-a.jsonl", cfg["global_batch_size"], warmup)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=20, help="steps not counted (start-up, the first allocations)")
    args = ap.parse_args()
    one, two = [], []
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="gpufleet-bench-mh-") as d:
            tmp = Path(d)
            one.append(one_host(tmp, args.steps, args.warmup))
            two.append(two_hosts(tmp, args.steps, args.warmup))
        print(f"round {r + 1}: 1 host × 4 ranks {one[-1]:8.0f} samples/s   2 hosts × 2 ranks {two[-1]:8.0f} samples/s")
    a, b = statistics.median(one), statistics.median(two)
    print(f"\nmedian over {args.rounds} rounds, global batch {CONFIG['global_batch_size']}, {args.steps} steps:")
    print(f"{'1 host × 4 ranks':>20} {'2 hosts × 2 ranks':>20} {'ratio (2×2 / 1×4)':>20}")
    print(f"{a:>20.0f} {b:>20.0f} {b / a:>20.3f}")


if __name__ == "__main__":
    main()
