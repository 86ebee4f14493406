"""Script launch: ``gpufleet run`` against ``torchrun --standalone`` started by hand, same script.

Time to the first reported step, two ranks (gloo on CPU; the GPUs are
simulated). The baseline starts ``python -m torch.distributed.run --standalone
--nproc_per_node 2 train.py`` and times until rank 0 prints its first step.
The gpufleet path starts ``gpufleet run --gpus 2 --no-follow`` (pack, upload,
submit) against a real server (the whole app), scheduler and worker, and times
until the first ``training_metrics`` row is visible through the API. The
script prints each step and calls ``gpufleet.report`` at the same moment, so
both clocks stop at the same point of the training (goal: gpufleet adds
< 0.5 s).

    python bench/script_launch.py [--rounds 5]

Rounds alternate between the two paths; medians are printed with the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from gpufleet.config import load_settings
from gpufleet.db.session import upgrade_database

SCRIPT = """\
import os, sys, time
import torch
import torch.distributed as dist
import gpufleet

dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(1, 6):
    loss = model(torch.randn(8, 16)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    gpufleet.report(step=step, loss=loss)
    if dist.get_rank() == 0:
        print(f"STEP {step}", flush=True)
dist.destroy_process_group()
"""
POLL_S = 0.05


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}


def by_hand(project: Path) -> float:
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                             "train.py"], cwd=project, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=_clean_env(), text=True)
    try:
        for line in proc.stdout:  # type: ignore[union-attr]
            if line.startswith("STEP"):
                return time.perf_counter() - t0
        raise RuntimeError(f"torchrun exited with {proc.wait()} before a step")
    finally:
        proc.wait()


def via_gpufleet(base: str, project: Path, data_dir: Path) -> tuple[float, dict[str, float]]:
    """Seconds to the first step visible through the API, and where they went."""
    wall0, t0 = time.time(), time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "gpufleet.cli", "run", "--gpus", "2", "--memory", "1GiB",
                          "--no-follow", "--", "python", "train.py"], cwd=project, capture_output=True, text=True,
                         env={**_clean_env(), "GPUFLEET_SERVER": base})
    if res.returncode != 0:
        raise RuntimeError(res.stderr)
    cli_done = time.time()
    tid = next(x.split()[1] for x in res.stdout.splitlines() if x.startswith("submitted "))
    with httpx.Client(base_url=base, timeout=60) as http:
        while True:
            if http.get(f"/api/v1/trainings/{tid}/metrics", params={"max_points": 2}).json()["total"] > 0:
                elapsed, seen = time.perf_counter() - t0, time.time()
                break
            if time.perf_counter() - t0 > 180:
                raise RuntimeError(f"training {tid} reported no step in 180 s")
            time.sleep(POLL_S)
        while http.get(f"/api/v1/trainings/{tid}").json()["status"] not in ("succeeded", "failed", "cancelled"):
            time.sleep(POLL_S)
        events = http.get(f"/api/v1/trainings/{tid}/events").json()["data"]
    from datetime import datetime

    claimed = next(datetime.fromisoformat(e["time"]).timestamp() for e in events if e["status"] == "running")
    lines = [json.loads(x) for x in (data_dir / "jobs" / tid / "progress-1.jsonl").read_text().splitlines()]
    first = {}
    for line in lines:
        first.setdefault(line["type"], line["time"])
    parts = {
        "cli (pack, upload, submit)": cli_done - wall0,
        "submit to worker claim": claimed - cli_done,
        "claim to launcher start": first["start"] - claimed,
        "launcher start to ranks started": first["ranks"] - first["start"],
        "ranks started to first report": first["step"] - first["ranks"],
        "first report to API": seen - first["step"],
    }
    return elapsed, parts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()

    import uvicorn

    from gpufleet.api.app import create_app
    from gpufleet.jobs.embedded import start_embedded_worker
    from gpufleet.jobs.scheduler_loop import start as start_scheduler
    from gpufleet.jobs.worker import ensure_host

    workdir = Path(tempfile.mkdtemp(prefix="gpufleet-script-launch-"))
    project = workdir / "proj"
    project.mkdir()
    (project / "train.py").write_text(SCRIPT)
    settings = load_settings(data_dir=workdir / "data", simulate="2xH100-80GB", host_name="bench-host", auth="off")
    upgrade_database(settings)
    ensure_host(settings)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning",
                                           lifespan="off"))
    threading.Thread(target=server.run, daemon=True).start()
    stop = threading.Event()
    from gpufleet.telemetry.agent import start_agent

    start_agent(settings, stop)  # heartbeats keep the host schedulable, as under `gpufleet serve`
    start_scheduler(settings, stop)
    worker = start_embedded_worker(settings)
    base = f"http://127.0.0.1:{port}"
    try:
        while not server.started:
            time.sleep(0.05)
        via_gpufleet(base, project, settings.data_dir)  # warm-up: the worker's first task, the page cache
        by_hand(project)
        ours, hand, shares = [], [], []
        for i in range(args.rounds):
            hand.append(by_hand(project))
            total, parts = via_gpufleet(base, project, settings.data_dir)
            ours.append(total)
            shares.append(parts)
            print(f"round {i + 1}: torchrun by hand {hand[-1]:.3f}s  gpufleet run {ours[-1]:.3f}s", flush=True)
        h, o = statistics.median(hand), statistics.median(ours)
        print("gpufleet run, median per stage:")
        for k in shares[0]:
            print(f"  {k:<34} {statistics.median(p[k] for p in shares):.3f}s")
        own = [p["cli (pack, upload, submit)"] + p["submit to worker claim"] + p["claim to launcher start"]
               + p["launcher start to ranks started"] + p["first report to API"] for p in shares]
        print(f"gpufleet's own share (everything but the ranks' start-up): {statistics.median(own):.3f}s")
        print(f"torchrun --standalone by hand (baseline): {h:.3f}s to the first step (median of {args.rounds})")
        print(f"gpufleet run (pack, upload, schedule, launch): {o:.3f}s to the first reported step")
        print(f"difference: {o - h:+.3f}s  ratio {o / h:.2f}x  (goal: gpufleet adds < 0.5 s)")
    finally:
        stop.set()
        worker.kill()
        worker.wait()
        server.should_exit = True
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
