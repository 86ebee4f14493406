"""One measured quantity: a recipe training's peak per rank is what NVML shows
for the rank's process (here the simulator's NVML: its context plus the
memory the rank holds), and the next run of the same shape is estimated at it.

A real worker process, the real launcher and its two DDP ranks (CPU + gloo on
simulated GPUs), embedded SQLite."""

from __future__ import annotations

import pytest

from support.fleet import FINAL, TINY_SAE, get_events, make_settings, register, wait_status

pytestmark = pytest.mark.slow

MiB = 2**20
CONTEXT_MB = 700
SHAPE = dict(TINY_SAE, max_steps=20, log_every=5, checkpoint_every=100)


def _run(c, settings) -> dict:
    r = c.post("/api/v1/trainings", json={"name": "mem", "recipe": "sae", "config": SHAPE,
                                          "gpu_ids": [0, 1], "host": settings.host_name})
    assert r.status_code == 201, r.text
    body = wait_status(c, r.json()["id"], FINAL, 180)
    assert body["status"] == "succeeded", body
    return body


def test_second_run_is_estimated_at_what_the_first_measured(tmp_path, client_for, workers, scheduler) -> None:
    settings = make_settings(tmp_path, "sqlite", sim_context_mb=CONTEXT_MB)
    register(settings)  # the host's agent measures the context (the simulator's: the setting)
    workers(settings)
    scheduler(settings)
    c = client_for(settings)

    first = _run(c, settings)
    assert first["estimate"]["context_bytes"] == CONTEXT_MB * MiB
    per_rank = first["peak_memory_per_rank"]
    assert len(per_rank) == 2 and first["measured_peak_memory"] == max(per_rank)
    # NVML's figure: the context plus what each rank's process holds, not the allocator's peak.
    assert all(p > CONTEXT_MB * MiB for p in per_rank)
    memory = [e for e in get_events(c, first["id"]) if e["reason"].startswith("peak memory per rank")]
    assert memory and memory[-1]["data"]["nvml_per_rank"] == per_rank
    assert memory[-1]["data"]["reported_per_rank"] is not None  # the ranks' own figures, as breakdown
    # A simulated rank holds its whole process's memory beyond the context, which the estimate of a
    # tiny model does not: the worker sees it go over its reservation and says so, once.
    (over,) = [e for e in get_events(c, first["id"]) if e["kind"] == "warning" and "reserved for it" in e["reason"]]
    assert over["data"]["reserved"] == first["memory_estimate"] < over["data"]["measured"] <= max(per_rank)

    # The start-up breakdown of each rank (engine/startup.py), for the dashboard's table.
    (startup,) = [e["data"]["startup"] for e in get_events(c, first["id"]) if (e["data"] or {}).get("startup")]
    assert startup["phases"] == ["launcher", "imports", "device", "process_group", "model", "first_step"]
    assert len(startup["per_rank"]) == 2 and all(len(r) == 6 and sum(r) > 0 for r in startup["per_rank"])
    assert all(r[3] > 0 for r in startup["per_rank"])  # two ranks join a process group

    second = _run(c, settings)
    est = second["estimate"]
    assert est["calibrated_from"] == 1
    measured = first["measured_peak_memory"]
    assert abs(est["total"] - measured) / measured < 0.05, (est["total"], measured)
    assert second["memory_estimate"] == est["total"]
