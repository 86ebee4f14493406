"""A PostgreSQL outage during a running training, with a real worker, scheduler loop and ranks: one shorter than
``GPUFLEET_DB_OUTAGE_GRACE_S`` costs the training nothing (the same ranks run on, no restart, one attempt), and
a longer one stops the ranks and requeues the training naming the outage (gpufleet.jobs.reach, jobs/watch.py)."""

from __future__ import annotations

import time

import pytest

from support.fleet import TINY_SAE, alive, get_events, get_training, make_settings, pids_in_group, register, wait_for
from support.postgres import pg_ctl, start_server

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]
LONG = dict(TINY_SAE, max_steps=1_000_000, checkpoint_every=20)


def _running(c, settings) -> tuple[str, dict]:
    r = c.post("/api/v1/trainings", json={"name": "through-an-outage", "recipe": "sae", "config": LONG,
                                          "world_size": 2, "host": settings.host_name})
    assert r.status_code == 201, r.text
    tid = r.json()["id"]
    body = wait_for(lambda: (b := get_training(c, tid))["step"] >= 3 and b, 300, "a few steps", 0.2)
    assert body["status"] == "running" and pids_in_group(body["launcher_pid"]), body
    return tid, body


def _outage(pg_control, seconds: float, during=lambda: None) -> None:
    pg_ctl(pg_control, "stop", "-m", "fast", "-w")
    try:
        began = time.monotonic()
        while time.monotonic() - began < seconds:
            during()
            time.sleep(0.5)
    finally:
        start_server(pg_control)


def test_a_30s_postgresql_stop_costs_a_running_training_no_restart_and_never_two_copies(
        tmp_path, request, client_for, workers, scheduler, pg_control):
    # A lease well inside the outage: the old judge and the old fence both gave up on it within 10 s.
    settings = make_settings(tmp_path, "postgresql", request, lease_s=10.0, db_outage_grace_s=180.0)
    register(settings)
    w = workers(settings)
    scheduler(settings)
    c = client_for(settings)
    tid, before = _running(c, settings)
    ranks = pids_in_group(before["launcher_pid"])

    def the_same_ranks_run() -> None:
        assert all(alive(p) for p in ranks), f"a rank was stopped during the outage:\n{w.output()[-3000:]}"

    _outage(pg_control, 30.0, the_same_ranks_run)
    back = time.monotonic()
    # The judge has had its chance: more than a lease of reachable time since the database came back.
    wait_for(lambda: time.monotonic() - back > 3 * settings.lease_s and get_training(c, tid)["step"] > before["step"],
             300, "three leases of reachable time, and progress", 0.5)
    after = get_training(c, tid)
    assert (after["status"], after["attempt"], after["restarts"]) == ("running", 1, 0), after
    assert after["launcher_pid"] == before["launcher_pid"] and all(alive(p) for p in ranks)
    assert not [e for e in get_events(c, tid) if e["kind"] == "retry"], get_events(c, tid)
    def whole_log() -> str:  # the log comes in chunks: read them all
        text, offset = "", 0
        while True:
            chunk = c.get(f"/api/v1/trainings/{tid}/logs", params={"offset": offset}).json()
            text += chunk["text"]
            if chunk["next_offset"] <= offset or chunk["next_offset"] >= chunk["size"]:
                return text
            offset = chunk["next_offset"]

    def log_once_back() -> str | None:
        text = whole_log()
        return text if "the database is back after" in text else None

    # The worker's lines reach the API as its log is shipped, a moment after they are written.
    text = wait_for(log_once_back, 120, "the log to say the database is back", 0.5)
    assert "cannot reach the database; the ranks keep running for up to 180s" in text, text[-3000:]
    assert c.post(f"/api/v1/trainings/{tid}/cancel").status_code == 200
    wait_for(lambda: get_training(c, tid)["status"] == "cancelled", 120, "the cancel", 0.5)


def test_an_outage_longer_than_the_grace_stops_the_ranks_and_requeues_naming_the_outage(
        tmp_path, request, client_for, workers, scheduler, pg_control):
    settings = make_settings(tmp_path, "postgresql", request, lease_s=10.0, db_outage_grace_s=5.0)
    register(settings)
    workers(settings)
    scheduler(settings)
    c = client_for(settings)
    tid, before = _running(c, settings)
    ranks = pids_in_group(before["launcher_pid"])
    _outage(pg_control, 40.0)
    assert not [p for p in ranks if alive(p)]  # stopped within lease + grace, while the database was away
    retry = wait_for(lambda: [e for e in get_events(c, tid) if e["kind"] == "retry"], 120, "the requeue", 0.5)
    reason = retry[0]["reason"]
    assert "the database could not be reached for " in reason, reason
    assert "longer than GPUFLEET_DB_OUTAGE_GRACE_S (5s)" in reason, reason
    assert "not counted as a restart" in reason and "stopped renewing its lease" not in reason, reason
    assert retry[0]["data"]["retry_kind"] == "db_outage"
    body = wait_for(lambda: (b := get_training(c, tid))["attempt"] == 2 and b["status"] == "running" and b, 300,
                    "the next attempt", 0.5)
    assert body["restarts"] == 0
    assert c.post(f"/api/v1/trainings/{tid}/cancel").status_code == 200
    wait_for(lambda: get_training(c, tid)["status"] == "cancelled", 120, "the cancel", 0.5)


def test_the_judge_counts_only_time_it_could_reach_the_database():
    from datetime import timedelta

    from gpufleet.db.types import utcnow
    from gpufleet.jobs.reach import Reach

    t0 = utcnow()
    reach = Reach()
    reach.reached(t0)  # nothing before this process's first pass counts
    assert reach.reachable_since(t0 - timedelta(seconds=100), t0) == 0
    reach.reached(t0 + timedelta(seconds=5))
    reach.failed()  # an outage from about t0+5 ...
    reach.reached(t0 + timedelta(seconds=35))  # ... to t0+35: none of it counts
    now = t0 + timedelta(seconds=40)
    assert reach.reachable_since(t0, now) == pytest.approx(10)
    assert reach.unreachable_since(t0 + timedelta(seconds=3), now) == pytest.approx(30)
    assert reach.reachable_since(t0 + timedelta(seconds=36), now) == pytest.approx(4)
    # Others reconnecting after the outage: its first 3 s count as unreachable too, and stretches that the
    # settling joins are not counted twice.
    assert reach.reachable_since(t0, now, settle_s=3) == pytest.approx(7)
    reach.failed()
    reach.reached(t0 + timedelta(seconds=37))  # a second stretch, t0+35..37, inside the first one's settling
    later = t0 + timedelta(seconds=50)
    assert reach.unreachable_since(t0, later, settle_s=3) == pytest.approx(40 - 5)  # t0+5 .. t0+40

