"""Preemption with checkpoint, end to end: real workers, launcher and ranks, PostgreSQL, Redis.

The fleet is one simulated GPU. The victim is held at a known step by the
``GPUFLEET_TRAIN_HOLD`` drill (it waits there until it is asked to stop), so
the preemption always finds it running, however fast or slow the machine is.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime

import pytest
from gpufleet.db.models import TrainingMetric
from gpufleet.db.session import session_scope
from sqlalchemy import select

from support.fleet import (
    FINAL,
    TINY_SAE,
    get_events,
    get_training,
    make_settings,
    register,
    wait_for,
    wait_status,
)

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]

HOLD_AT = 5


def _steps(settings, tid):
    with session_scope(settings) as sess:
        return list(sess.execute(select(TrainingMetric.step).where(
            TrainingMetric.training_id == uuid.UUID(tid)).order_by(TrainingMetric.step)).scalars())


def _at(body: dict, key: str) -> datetime:
    return datetime.fromisoformat(body[key])


def test_a_high_priority_training_preempts_a_full_fleet_and_the_victim_resumes_from_its_checkpoint(
        tmp_path, request, client_for, workers, scheduler):
    s = make_settings(tmp_path, "postgresql", request, simulate="1xH100-80GB", lease_s=3.0, stop_grace_s=20.0)
    register(s)
    # Every training on this worker waits after step HOLD_AT until it is asked to stop;
    # the others end before they reach it.
    workers(s, env={"GPUFLEET_TRAIN_HOLD": f"{HOLD_AT}:{tmp_path / 'never-created'}"})
    scheduler(s)
    c = client_for(s)

    def submit(name: str, priority: int, max_steps: int, **kw) -> str:
        r = c.post("/api/v1/trainings", json={
            "name": name, "recipe": "sae", "priority": priority, "world_size": 1,
            "config": dict(TINY_SAE, max_steps=max_steps, checkpoint_every=100000), **kw})
        assert r.status_code == 201, r.text
        return r.json()["id"]

    # Sign-in is off here, so every request is the local admin's, whose trainings are not preemptible by default.
    victim = submit("victim", 0, 12, preemptible=True)
    wait_for(lambda: get_training(c, victim)["step"] >= HOLD_AT, 180, "the victim to reach its hold", 0.2)
    # Queued before the urgent one, at the victim's priority: it must not get the freed GPU first.
    third = submit("third", 0, 4)
    urgent = submit("urgent", 10, 4, preemptible=False)

    body = wait_status(c, urgent, ("running", *FINAL), 120)
    waited = (_at(body, "started_at") - _at(body, "created_at")).total_seconds()
    print(f"the urgent training started {waited:.1f}s after it was submitted (bound {s.stop_grace_s + 10:.0f}s)")
    assert waited <= s.stop_grace_s + 10, f"the urgent training started {waited:.1f}s after it was submitted"
    assert body["selection"]["by"] == "preemption", body["selection"]

    for tid in (urgent, victim, third):
        body = wait_status(c, tid, FINAL, 240)
        assert body["status"] == "succeeded", body

    v = get_training(c, victim)
    said = "\n".join(f"{e['kind']}: {e['reason']}" for e in get_events(c, victim))
    assert v["restarts"] == 0 and v["attempt"] == 2, f"restarts {v['restarts']}, attempt {v['attempt']}:\n{said}"
    # Stopped at the hold, no step past it, with a checkpoint there, and resumed from it: one continuous curve.
    assert _steps(s, victim) == list(range(1, 13))
    events = get_events(c, victim)
    asked = [e for e in events if e["kind"] == "preempt"]
    assert len(asked) == 1 and "urgent" in asked[0]["reason"] and asked[0]["data"]["preempted_by"] == urgent
    preempted = [e for e in events if e["status"] == "preempted"]
    assert len(preempted) == 1 and f"checkpointed at step {HOLD_AT} within the grace" in preempted[0]["reason"] \
        and f"resume from step {HOLD_AT}" in preempted[0]["reason"], preempted
    retry = [e for e in events if e["kind"] == "retry"]
    assert len(retry) == 1 and retry[0]["data"]["retry_kind"] == "preempted", retry
    assert retry[0]["data"]["checkpoint_step"] == HOLD_AT
    assert "not counted as a restart" in retry[0]["reason"]
    progress = (s.data_dir / "jobs" / victim / "progress-2.jsonl").read_text().splitlines()
    resumed = [json.loads(line) for line in progress if '"resume"' in line]
    assert [r["step"] for r in resumed] == [HOLD_AT], progress[:5]

    u_events = get_events(c, urgent)
    mine = [e for e in u_events if e["kind"] == "preempt"]
    assert any("preempting" in e["reason"] and "victim" in e["reason"] for e in mine), mine
    assert any(e["reason"].startswith("takes GPUs [0]") for e in mine), mine
    # The freed GPU went to the urgent training, not to the third one queued before it.
    u, t3 = get_training(c, urgent), get_training(c, third)
    assert _at(t3, "started_at") > _at(u, "started_at")
    assert t3["attempt"] == 1


def test_a_training_past_its_max_runtime_is_checkpointed_and_stopped(tmp_path, request, client_for, workers,
                                                                     scheduler):
    s = make_settings(tmp_path, "postgresql", request, simulate="1xH100-80GB", lease_s=3.0, stop_grace_s=20.0)
    register(s)
    workers(s, env={"GPUFLEET_TRAIN_HOLD": f"{HOLD_AT}:{tmp_path / 'never-created'}"})
    scheduler(s)
    c = client_for(s)
    # Long enough for a loaded machine to reach the hold first, where it then waits until stopped.
    r = c.post("/api/v1/trainings", json={"name": "bounded", "recipe": "sae", "world_size": 1, "max_runtime_s": 45,
                                          "config": dict(TINY_SAE, max_steps=50, checkpoint_every=100000)})
    assert r.status_code == 201, r.text
    tid = r.json()["id"]
    body = wait_status(c, tid, FINAL, 180)
    assert body["status"] == "failed", body
    assert body["status_reason"] == (f"ran past its max_runtime of 45s; it checkpointed at step {HOLD_AT} within "
                                     f"the grace (step-{HOLD_AT}); `gpufleet trainings resume` continues it (will "
                                     f"resume from step {HOLD_AT})")
    assert body["last_checkpoint"] and body["restarts"] == 0
