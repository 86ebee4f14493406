"""One viewer's burst of huge memory estimates cannot stall a real `gpufleet serve`."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from support.servers import STRONG_SECRET, cli, make_token, serve_process

pytestmark = pytest.mark.slow
PROBE_TIMEOUT_S = 120.0

# 50 concurrent estimates of configs near the size limits (hundreds of layers:
# a trace of seconds to minutes), each different so that no cache helps.
BURST = """
import asyncio, json, sys
import httpx

async def main(url, authz):
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": authz}, timeout=600) as c:
        rs = await asyncio.gather(*(c.post("/api/v1/system/gpus/recommend", json={
            "recipe": "mlp",
            "config": {"hidden": [64 + i] * 480, "in_features": 4096, "global_batch_size": 4096}})
            for i in range(50)))
    print(json.dumps([[r.status_code, r.json().get("detail") if r.status_code != 200 else None] for r in rs]))

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def test_fifty_concurrent_worst_case_estimates_leave_the_api_responsive(tmp_path: Path) -> None:
    data = tmp_path / "data"
    # Ten of the fifty are let through a minute (the default is 30): the estimate pool is kept busy by ten
    # worst-case traces as it would be by thirty, and the machine is not (each one over budget costs a new
    # tracing process, torch and all).
    env = {"GPUFLEET_AUTH": "on", "GPUFLEET_SECRET_KEY": STRONG_SECRET, "GPUFLEET_EMBEDDED_WORKER": "false",
           "GPUFLEET_ESTIMATE_BUDGET_S": "4", "GPUFLEET_ESTIMATE_RATE_PER_MINUTE": "10"}
    viewer = make_token(data, "vic", "viewer", **env)
    cli(data, "users", "add", "ann", "--role", "member", **env)
    ann = {"Authorization": "Bearer " + cli(data, "tokens", "create", "ann", **env).strip().splitlines()[-1].strip()}
    headers = {"Authorization": f"Bearer {viewer}"}
    with serve_process(data, **env) as srv:
        answered: list[str] = []
        refused_probes: list[str] = []
        done = threading.Event()

        def probe() -> None:
            # A stall is minutes unanswered; a loaded machine (other work, load 10-45 on two cores) may take
            # seconds. The probes' percentiles against an idle baseline are bench/estimate_burst.py's.
            with httpx.Client(base_url=srv.url, headers=headers, timeout=PROBE_TIMEOUT_S) as c:
                while not done.is_set():
                    for path in ("/healthz", "/api/v1/trainings"):
                        try:
                            r = c.get(path)
                        except httpx.TimeoutException:
                            refused_probes.append(f"{path}: no answer within {PROBE_TIMEOUT_S:.0f} s")
                            continue
                        if r.status_code != 200:  # an assert here would only end this thread
                            refused_probes.append(f"{path}: {r.status_code} {r.text[:200]}")
                        answered.append(path)
                    time.sleep(0.05)

        prober = threading.Thread(target=probe)
        prober.start()
        try:
            # The burst comes from a process of its own, so the probes here time the server, not this client.
            started = time.monotonic()
            out = subprocess.run([sys.executable, "-c", BURST, srv.url, headers["Authorization"]],
                                 capture_output=True, text=True, timeout=600)
            # A fast machine may answer the whole burst in a second; probe on for a few
            # seconds more while the pool's traces are still running or being killed, and
            # until enough probes were answered to say something (a slow one still counts).
            deadline = time.monotonic() + 3 * PROBE_TIMEOUT_S
            while (time.monotonic() - started < 5.0 or len(answered) < 20) and time.monotonic() < deadline:
                time.sleep(0.2)
        finally:
            done.set()
            prober.join(timeout=2 * PROBE_TIMEOUT_S)
        assert out.returncode == 0, out.stderr
        answers = json.loads(out.stdout)
        codes = [code for code, _ in answers]
        assert set(codes) <= {200, 422, 429}, [a for a in answers if a[0] >= 500]
        # Past the per-user rate (10 a minute here) or the queue, the rest are told to come back.
        assert codes.count(429) >= 38, codes
        refused = [detail for code, detail in answers if code == 422]
        assert all("GPUFLEET_ESTIMATE_BUDGET_S" in d or "layers" in d for d in refused), refused
        print(f"estimate burst: {len(answered)} probes answered; answers "
              f"{ {c: codes.count(c) for c in sorted(set(codes))} } (bench/estimate_burst.py times them)")
        # Nobody else is refused, or left unanswered, because one viewer sent a burst of estimates.
        # (Before the estimate pool such a burst left /healthz unanswered for minutes.) How fast the
        # probes are answered depends on the machine: bench/estimate_burst.py prints their
        # percentiles against an idle baseline.
        assert not refused_probes, refused_probes[:5]
        assert len(answered) >= 20

        # The limit is per user: another user still gets estimates, and an over-limit model is named.
        over = {"recipe": "mlp", "config": {"hidden": [8] * 1500}}
        r = httpx.post(f"{srv.url}/api/v1/system/gpus/recommend", json=over, headers=ann, timeout=300)
        assert r.status_code == 422 and "layers" in r.json()["detail"], r.text
        # The pool may still be killing the burst's traces, and on a loaded machine a trace can
        # pass the 4 s budget set here: such a 422 names the budget, and the estimate is asked again.
        deadline = time.monotonic() + 180
        while True:
            r = httpx.post(f"{srv.url}/api/v1/system/gpus/recommend", json={"recipe": "mlp"}, headers=ann,
                           timeout=300)
            assert r.status_code in (200, 422), r.text
            if r.status_code == 200 or time.monotonic() > deadline:
                break
            assert "GPUFLEET_ESTIMATE_BUDGET_S" in r.json()["detail"], r.text
            time.sleep(2)
        assert r.status_code == 200, r.text
