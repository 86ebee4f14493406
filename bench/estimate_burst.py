"""How a burst of worst-case memory estimates affects the rest of the API.

Starts a real `gpufleet serve` (sign-in on, simulated fleet), then probes
`/healthz` and `GET /api/v1/trainings` every 50 ms: first with nothing else
going on (the baseline), then while one viewer sends 50 (``--requests``) concurrent estimates
of configs near the size limits. Prints the probes' p50/p95/max in both
phases, the ratio, and what the burst was answered with.

    .venv/bin/python bench/estimate_burst.py [--seconds 20] [--budget 4] [--requests 50]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _gpufleet(env: dict[str, str], *args: str) -> str:
    return subprocess.run([sys.executable, "-c", "from gpufleet.cli import main; main()", *args], env=env,
                          check=True, capture_output=True, text=True).stdout


def _probe(url: str, headers: dict[str, str], stop: threading.Event, out: list[float]) -> None:
    with httpx.Client(base_url=url, headers=headers, timeout=60) as c:
        while True:  # at least one round, however soon the phase ends
            for path in ("/healthz", "/api/v1/trainings"):
                t0 = time.perf_counter()
                c.get(path).raise_for_status()
                out.append(time.perf_counter() - t0)
            if stop.wait(0.05):
                break


def _summary(lat: list[float]) -> tuple[float, float, float]:
    lat = sorted(lat)
    return lat[len(lat) // 2] * 1000, lat[int(len(lat) * 0.95)] * 1000, lat[-1] * 1000


async def _burst(url: str, headers: dict[str, str], n: int) -> list[int]:
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=600) as c:
        rs = await asyncio.gather(*(c.post("/api/v1/system/gpus/recommend", json={
            "recipe": "mlp", "config": {"hidden": [64 + i] * 480, "in_features": 4096, "global_batch_size": 4096}})
            for i in range(n)))
    return [r.status_code for r in rs]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20.0, help="length of the baseline phase")
    ap.add_argument("--budget", type=float, default=4.0, help="GPUFLEET_ESTIMATE_BUDGET_S")
    ap.add_argument("--requests", type=int, default=50, help="concurrent estimates in the burst")
    args = ap.parse_args()
    data = Path(tempfile.mkdtemp()) / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    env.update(GPUFLEET_DATA_DIR=str(data), GPUFLEET_AUTH="on", GPUFLEET_SECRET_KEY=secrets.token_urlsafe(48),
               GPUFLEET_EMBEDDED_WORKER="false", GPUFLEET_SIMULATE="2xH100-80GB",
               GPUFLEET_ESTIMATE_BUDGET_S=str(args.budget),
               GPUFLEET_SESSIONS_PORT="0")  # no notebooks' listener on the port after the API's, which may be taken
    _gpufleet(env, "db", "upgrade")
    _gpufleet(env, "users", "add", "vic", "--role", "viewer")
    token = _gpufleet(env, "tokens", "create", "vic").strip().splitlines()[-1].strip()
    headers = {"Authorization": f"Bearer {token}"}
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-c", "from gpufleet.cli import main; main()", "serve", "--port",
                             str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                sys.exit("serve did not come up")
            time.sleep(0.3)
        phases: dict[str, list[float]] = {}
        for phase in ("baseline", "burst"):
            lat: list[float] = []
            stop = threading.Event()
            t = threading.Thread(target=_probe, args=(url, headers, stop, lat))
            t.start()
            started = time.monotonic()
            if phase == "baseline":
                time.sleep(args.seconds)
            else:
                codes = asyncio.run(_burst(url, headers, args.requests))
            stop.set()
            t.join()
            phases[phase] = lat
            p50, p95, worst = _summary(lat)
            print(f"{phase:8s}: {len(lat):5d} probes in {time.monotonic() - started:5.1f} s;"
                  f" p50 {p50:6.1f} ms  p95 {p95:6.1f} ms  max {worst:7.1f} ms")
        print("burst answers:", {c: codes.count(c) for c in sorted(set(codes))})
        (b50, b95, bmax), (u50, u95, umax) = _summary(phases["baseline"]), _summary(phases["burst"])
        print(f"ratio burst/baseline: p50 {u50 / b50:.2f}x  p95 {u95 / b95:.2f}x  max {umax / bmax:.2f}x")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
