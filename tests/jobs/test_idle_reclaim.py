"""Idle reclaim, end to end: a worker with its agent writing the GPU history, the scheduler loop watching it.

The simulated GPU is told its training's processes run nothing
(``simstate.set_idle``), so its utilisation reads 0 in the samples the agent
stores, as a real GPU held by an idle notebook would. The training is held at
a known step by the ``GPUFLEET_TRAIN_HOLD`` drill, so it is running whatever
the machine's speed.
"""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta

import pytest
from gpufleet.devices import simstate

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


@pytest.fixture
def worker_with_agent(tmp_path):
    from gpufleet.jobs.embedded import settings_env, worker_command
    from gpufleet.jobs.procs import kill_orphans

    started = []

    def start(settings, env):
        log = open(tmp_path / "worker-agent.log", "ab")  # noqa: SIM115 - closed below
        proc = subprocess.Popen(worker_command(settings.host_name, agent=True) + ["--concurrency", "4"],
                                env={**settings_env(settings), **env}, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        started.append((proc, log, settings))
        return proc

    yield start
    for proc, log, settings in started:
        proc.kill()
        proc.wait(10)
        log.close()
        kill_orphans(settings, settings.host_name)


def test_a_training_left_idle_past_the_window_is_warned_then_reclaimed_with_its_checkpoint(
        tmp_path, request, client_for, worker_with_agent, scheduler):
    s = make_settings(tmp_path, "postgresql", request, simulate="1xH100-80GB", lease_s=3.0, stop_grace_s=20.0,
                      sample_interval_s=0.5, idle_action="stop", idle_window_s=6.0, idle_threshold_percent=5.0)
    register(s)
    worker_with_agent(s, {"GPUFLEET_TRAIN_HOLD": f"{HOLD_AT}:{tmp_path / 'never-created'}"})
    scheduler(s)
    c = client_for(s)
    r = c.post("/api/v1/trainings", json={"name": "notebook", "recipe": "sae", "world_size": 1,
                                          "config": dict(TINY_SAE, max_steps=50, checkpoint_every=100000)})
    assert r.status_code == 201, r.text
    tid = r.json()["id"]
    wait_for(lambda: get_training(c, tid)["step"] >= HOLD_AT, 180, "the training to reach its hold", 0.2)
    # Held, but its GPU is busy: nothing is said, however long past the window it runs.
    started = datetime.fromisoformat(get_training(c, tid)["started_at"])
    wait_for(lambda: datetime.now(UTC) - started > timedelta(seconds=s.idle_window_s + 3), 60,
             "the training to have run longer than the idle window")
    body = get_training(c, tid)
    assert body["status"] == "running" and body["idle_since"] is None and body["idle_warned_at"] is None
    # (A simulated rank holds its process's memory on top of the context, more than the estimate of a
    # tiny model reserved: that warning is the reservation's, not the idle rule's.)
    assert not [e for e in get_events(c, tid) if e["kind"] == "warning" and "reserved for it" not in e["reason"]]
    simstate.set_idle(s, 0)
    body = wait_status(c, tid, FINAL, 120)
    assert body["status"] == "reclaimed", body
    assert body["status_reason"] == (f"reclaimed: its GPUs stayed idle; it checkpointed at step {HOLD_AT} within "
                                     f"the grace (step-{HOLD_AT}); `gpufleet trainings resume` continues it (will "
                                     f"resume from step {HOLD_AT})")
    assert body["last_checkpoint"].endswith(f"step-{HOLD_AT}") and body["restarts"] == 0
    assert body["idle_warned_at"] is not None and body["gpus"][0]["released_at"] is not None
    events = get_events(c, tid)
    warned = [i for i, e in enumerate(events) if e["kind"] == "warning" and "below 5% utilisation" in e["reason"]]
    ended = [i for i, e in enumerate(events) if e["status"] == "reclaimed"]
    assert len(warned) == 1 and len(ended) == 1 and warned[0] < ended[0], events
    assert "reclaiming them" in events[warned[0]]["reason"]
