"""Fair admission on a real `gpufleet serve`: one caller's flood slows only that caller."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
from support.servers import STRONG_SECRET, make_token, serve_process

FLOOD_THREADS = 16
FLOOD_S = 20.0
READ = "/api/v1/trainings?limit=1"


def _flood(url: str, token: str, until: float, codes: list[int]) -> None:
    # Ignores Retry-After on purpose: the worst a client can do with valid, cheap reads.
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as client:
        while time.monotonic() < until:
            codes.append(client.get(READ).status_code)


def test_a_viewers_flood_leaves_the_admins_reads_answered(tmp_path: Path) -> None:
    env = {"GPUFLEET_AUTH": "on", "GPUFLEET_SECRET_KEY": STRONG_SECRET, "GPUFLEET_EMBEDDED_WORKER": "false",
           # Fewer slots than flooding threads, whatever the machine's cores.
           "GPUFLEET_MAX_CONCURRENT_REQUESTS": "4"}
    data = tmp_path / "data"
    admin = make_token(data, "boss", "admin", **env)
    viewer = make_token(data, "peek", "viewer", **env)
    with serve_process(data, **env) as srv:
        until = time.monotonic() + FLOOD_S
        flood_codes: list[int] = []
        threads = [threading.Thread(target=_flood, args=(srv.url, viewer, until, flood_codes), daemon=True)
                   for _ in range(FLOOD_THREADS)]
        for t in threads:
            t.start()
        admin_codes: list[int] = []
        with httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {admin}"}, timeout=60) as client:
            while time.monotonic() < until:
                admin_codes.append(client.get(READ).status_code)
                time.sleep(0.2)  # an admin's pace, not a wait for a condition
        for t in threads:
            t.join(90)
    # The flood did fill the server (else this test proves nothing) and got its refusals.
    assert flood_codes.count(429) > 0, f"the flood never filled the server: {len(flood_codes)} reads"
    assert set(flood_codes) <= {200, 429}, sorted(set(flood_codes))
    answered = admin_codes.count(200) / len(admin_codes)
    assert answered >= 0.95, (f"the admin got 200 on {admin_codes.count(200)} of {len(admin_codes)} reads "
                              f"({admin_codes.count(429)} x 429) while the viewer's flood got "
                              f"{flood_codes.count(429)} x 429 of {len(flood_codes)}")
