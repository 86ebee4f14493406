"""The fleet page with 64 live GPUs: main-thread time the browser spends per second.

Starts `gpufleet serve` on a simulated fleet of 64 GPUs (8 hosts' worth on one
simulated host), opens the dashboard in headless Chromium at 1280x800, waits
for every card, then measures for `--seconds` with the Chrome DevTools
Performance metrics how much main-thread task and script time the page uses
per second while every GPU streams a sample each second: with the cards a
1280x800 screen shows (the others are not subscribed), and with all 64 on
screen (a 6000 px tall window). Baseline in the same run: the same page whose
live stream never answers (REST snapshot and its 5 s refresh only), so the
ratio is what live updates cost.

    .venv/bin/python bench/dashboard_fleet.py [--gpus 64] [--seconds 20]

Needs a built dashboard (scripts/build-frontend.sh), /usr/bin/chromium and playwright.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metrics(cdp) -> dict[str, float]:
    return {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}


def measure(page, cdp, seconds: float) -> tuple[float, float]:
    a = metrics(cdp)
    t0 = time.monotonic()
    page.wait_for_timeout(seconds * 1000)
    b = metrics(cdp)
    dt = time.monotonic() - t0
    return ((b["TaskDuration"] - a["TaskDuration"]) / dt * 1000,
            (b["ScriptDuration"] - a["ScriptDuration"]) / dt * 1000)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=20)
    args = ap.parse_args()
    data = Path(tempfile.mkdtemp(prefix="gpufleet-bench-"))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    # Single-user mode: the page opens on the fleet, not on a sign-in form.
    # No notebooks' listener: it would take the port after the API's, which another process may hold.
    env.update(GPUFLEET_SIMULATE=f"{args.gpus}xH100-80GB", GPUFLEET_DATA_DIR=str(data), GPUFLEET_HOST_NAME="sim-host",
               GPUFLEET_AUTH="off", GPUFLEET_SESSIONS_PORT="0")
    exe = Path(sys.executable).with_name("gpufleet")
    proc = subprocess.Popen([str(exe), "serve", "--port", str(port)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            if proc.poll() is not None:
                raise SystemExit(f"gpufleet serve exited with {proc.returncode} before it answered")
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        else:
            raise SystemExit(f"gpufleet serve did not answer {base}/healthz")
        results = {}
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=CHROMIUM_ARGS)
            modes = [
                ("snapshot only (no live stream)", 800, False),
                ("live, cards on screen", 800, True),
                ("live, all cards on screen", 6000, True),
            ]
            for mode, height, live in modes:
                # The probe below is a string, which the CSP forbids evaluating.
                ctx = browser.new_context(viewport={"width": 1280, "height": height}, bypass_csp=True)
                page = ctx.new_page()
                if not live:
                    # A socket that never answers: the page keeps its REST snapshot and 5 s refresh.
                    page.route_web_socket("**/api/v1/ws", lambda ws: None)
                page.goto(base + "/")
                page.wait_for_function("document.querySelectorAll(\"[data-testid^='gpu-card-']\").length"
                                       f" === {args.gpus}", timeout=60_000)
                cdp = ctx.new_cdp_session(page)
                cdp.send("Performance.enable")
                page.wait_for_timeout(3000)
                results[mode] = measure(page, cdp, args.seconds)
                ctx.close()
            browser.close()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    print(f"fleet page, {args.gpus} simulated GPUs, 1280 px wide, {args.seconds:.0f} s, headless Chromium:")
    for mode, (task, script) in results.items():
        print(f"  {mode:32s} main-thread tasks {task:6.1f} ms/s   script {script:6.1f} ms/s")
    base_task = results["snapshot only (no live stream)"][0]
    for mode in ("live, cards on screen", "live, all cards on screen"):
        live_task = results[mode][0]
        print(f"  {mode}: {live_task / max(base_task, 1e-9):.1f}x the snapshot-only page, "
              f"{live_task / 10:.1f}% of one core")


if __name__ == "__main__":
    main()
