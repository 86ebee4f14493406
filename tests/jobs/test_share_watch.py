"""The share watchdog: a training over its share is stopped alone and requeued with its measured peak.

Three trainings share one simulated GPU (a batch, not exclusive); the simulator counts each rank's
process as the context plus its real resident memory, so a budget below what torch's process holds is
really exceeded. A real worker, launcher and ranks (CPU on simulated GPUs), embedded SQLite.
"""

from __future__ import annotations

import json
import uuid

import pytest
from gpufleet.db.models import TrainingMetric
from gpufleet.db.session import session_scope
from sqlalchemy import select

from support.fleet import FINAL, TINY_SAE, get_events, make_settings, register, wait_status

pytestmark = pytest.mark.slow

MiB = 2**20
CONTEXT_MB = 300
SHAPE = dict(TINY_SAE, max_steps=12, checkpoint_every=4)


def _steps(settings, tid: str) -> list[int]:
    with session_scope(settings) as sess:
        return sorted(set(sess.scalars(select(TrainingMetric.step).where(
            TrainingMetric.training_id == uuid.UUID(tid)))))


def test_an_overrun_is_stopped_alone_and_requeued_while_its_neighbours_succeed(tmp_path, client_for, workers,
                                                                                 scheduler) -> None:
    s = make_settings(tmp_path, "sqlite", simulate="1xH100-80GB", sim_context_mb=CONTEXT_MB,
                      gpu={"max_models_per_gpu": 3}, share_over_s=0.5, share_sample_s=0.2, stop_grace_s=30.0)
    register(s)
    workers(s)
    scheduler(s)
    c = client_for(s)
    # Little beyond the context: its process holds more than its share once torch is loaded.
    items = [{"name": "greedy", "recipe": "sae", "config": SHAPE, "memory_mb": CONTEXT_MB + 200}]
    items += [{"name": f"calm{i}", "recipe": "sae", "config": SHAPE, "memory_mb": 16 * 1024} for i in range(2)]
    r = c.post("/api/v1/trainings/batch", json={"items": items, "host": s.host_name})
    assert r.status_code == 201, r.text
    greedy, *calm = [t["id"] for t in r.json()["data"]]

    for tid in calm:
        body = wait_status(c, tid, FINAL, 300)
        assert body["status"] == "succeeded" and body["attempt"] == 1, body  # never stopped, never retried
        assert _steps(s, tid) == list(range(1, SHAPE["max_steps"] + 1))  # neighbours' steps lost: none
        assert not [e for e in get_events(c, tid) if "share watchdog" in e["reason"]]
        (held,) = [e for e in get_events(c, tid) if (e["data"] or {}).get("methods")]
        assert held["data"]["methods"] == ["allocator", "watchdog"]  # the simulated driver 560 has no limit
        assert "driver 560.35.03 has no nvmlDeviceSetMemoryLimits_v1" in held["reason"]

    # The launcher was told the share, so each rank caps PyTorch's allocator at it (tests/rankpath).
    specs = {json.loads(p.read_text())["training_id"]: json.loads(p.read_text()) for p in tmp_path.rglob("spec-1.json")}
    assert specs[calm[0]]["share_mb"] == 16 * 1024 and specs[greedy]["share_mb"] == CONTEXT_MB + 200

    body = wait_status(c, greedy, FINAL, 300)
    events = get_events(c, greedy)
    (warned,) = [e for e in events if e["reason"].startswith("share watchdog")]
    assert warned["data"]["held"] > warned["data"]["budget"] >= CONTEXT_MB * MiB
    (retry,) = [e for e in events if e["kind"] == "retry"]
    assert retry["data"]["retry_kind"] == "share_overrun" and "as a share again" in retry["reason"]
    # Its second attempt ran with the peak it measured (+10 %) as its estimate, still beside the others.
    assert body["memory_estimate"] == warned["data"]["new_estimate"] and body["exclusive"] is False
    assert body["status"] == "succeeded" and body["attempt"] == 2, body
