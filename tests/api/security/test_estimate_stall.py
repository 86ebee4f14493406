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

from servers import STRONG_SECRET, cli, make_token, serve_process

pytestmark = pytest.mark.slow

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
    env = {"GPUFLEET_AUTH": "on", "GPUFLEET_SECRET_KEY": STRONG_SECRET, "GPUFLEET_EMBEDDED_WORKER": "false",
           "GPUFLEET_ESTIMATE_BUDGET_S": "4"}
    viewer = make_token(data, "vic", "viewer", **env)
    cli(data, "users", "add", "ann", "--role", "member", **env)
    ann = {"Authorization": "Bearer " + cli(data, "tokens", "create", "ann", **env).strip().splitlines()[-1].strip()}
    headers = {"Authorization": f"Bearer {viewer}"}
    with serve_process(data, **env) as srv:
        slowest: dict[str, float] = {"/healthz": 0.0, "/api/v1/trainings": 0.0}
        latencies: list[float] = []
        probes = {"n": 0}
        refused_probes: list[str] = []
        done = threading.Event()

        def probe() -> None:
            with httpx.Client(base_url=srv.url, headers=headers, timeout=30) as c:
                while not done.is_set():
                    for path in slowest:
                        t0 = time.perf_counter()
                        r = c.get(path)
                        took = time.perf_counter() - t0
                        if r.status_code != 200:  # an assert here would only end this thread
                            refused_probes.append(f"{path}: {r.status_code} {r.text[:200]}")
                        slowest[path] = max(slowest[path], took)
                        latencies.append(took)
                        probes["n"] += 1
                    time.sleep(0.05)

        prober = threading.Thread(target=probe)
        prober.start()
        try:
            # The burst comes from a process of its own, so the probes here time the server, not this client.
            started = time.monotonic()
            out = subprocess.run([sys.executable, "-c", BURST, srv.url, headers["Authorization"]],
                                 capture_output=True, text=True, timeout=600)
            # A fast machine may answer the whole burst in a second; probe on for a few
            # seconds more while the pool's traces are still running or being killed.
            time.sleep(max(0.0, 5.0 - (time.monotonic() - started)))
        finally:
            done.set()
            prober.join(timeout=60)
        assert out.returncode == 0, out.stderr
        answers = json.loads(out.stdout)
        codes = [code for code, _ in answers]
        assert set(codes) <= {200, 422, 429}, [a for a in answers if a[0] >= 500]
        # Past the per-user rate (30 a minute) or the queue, the rest are told to come back.
        assert codes.count(429) >= 20, codes
        refused = [detail for code, detail in answers if code == 422]
        assert all("GPUFLEET_ESTIMATE_BUDGET_S" in d or "layers" in d for d in refused), refused
        latencies.sort()
        p95 = latencies[int(len(latencies) * 0.95)]
        over = sum(t >= 0.2 for t in latencies)
        print(f"estimate burst: {len(latencies)} probes, p50 {latencies[len(latencies) // 2] * 1000:.0f} ms,"
              f" p95 {p95 * 1000:.0f} ms, slowest {slowest}, {over} at or over 200 ms;"
              f" answers { {c: codes.count(c) for c in sorted(set(codes))} }")
        # Nobody else is refused because one viewer sent a burst of estimates.
        assert not refused_probes, refused_probes[:5]
        assert len(latencies) >= 20
        # Before the estimate pool one such burst left /healthz unanswered for minutes. On a
        # shared, loaded test machine a single probe can be late for reasons of its own (an idle
        # server here shows the odd 200 ms), so the bound is on the 95th percentile, with a cap.
        assert p95 < 0.2, latencies[-20:]
        assert max(slowest.values()) < 2.0, slowest

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
