"""A PostgreSQL outage shorter than ``GPUFLEET_DB_OUTAGE_GRACE_S`` during a training across two hosts costs it
nothing: the member host waits the database out as the rank-0 host does, and once it is back neither host takes
the other's silence during the outage for a stopped worker (each judges the other over time it could reach the
database: gpufleet.jobs.reach, jobs/gang_member.py LeaderJudge, jobs/rendezvous.py LeaderWatch)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from support.fleet import FINAL, make_settings, register, unique, wait_for
from support.postgres import pg_ctl, start_server

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]

MLP = dict(in_features=8, hidden=[16, 16], out_features=3, task="classification", synthetic_samples=2048,
           global_batch_size=32, max_steps=1_000_000, log_every=5, checkpoint_every=50, lr=3e-3)


def _host(tmp_path: Path, request, name: str):
    # Leases far inside the outage: by the wall clock, every host's beat and lease look lapsed when it ends.
    return make_settings(tmp_path / name, "postgresql", request, host_name=unique(name), lease_s=10.0,
                         db_outage_grace_s=180.0, checkpoint_root=tmp_path / "shared-checkpoints",
                         advertise_address="127.0.0.1", network_interface="lo", rendezvous_timeout_s=240.0)


def test_a_30s_postgresql_stop_costs_a_training_across_two_hosts_no_restart(
        tmp_path, request, client_for, workers, scheduler, pg_control):
    a, b = _host(tmp_path, request, "a"), _host(tmp_path, request, "b")
    register(a), register(b)
    wa, wb = workers(a), workers(b)
    scheduler(a)
    c = client_for(a)
    r = c.post("/api/v1/trainings", json={"name": "gang-outage", "recipe": "mlp", "config": MLP, "max_restarts": 2,
                                          "hosts": [a.host_name, b.host_name], "gpus_per_host": 2})
    assert r.status_code == 201, r.text
    tid = r.json()["id"]
    get = lambda: c.get(f"/api/v1/trainings/{tid}").json()  # noqa: E731
    before = wait_for(lambda: (x := get())["status"] == "running" and x["step"] >= 10 and x, 400,
                      "both hosts' ranks to take steps", 0.5)
    pg_ctl(pg_control, "stop", "-m", "fast", "-w")
    try:
        time.sleep(30.0)
    finally:
        start_server(pg_control)
    back = time.monotonic()
    # More than three leases of reachable time, and steps past the outage: every judge has had its say.
    after = wait_for(lambda: time.monotonic() - back > 3 * a.lease_s and (x := get())["step"] > before["step"] + 5
                     and x, 300, "three leases of reachable time, and progress", 0.5)
    events = c.get(f"/api/v1/trainings/{tid}/events").json()["data"]
    logs = f"host a:\n{wa.output()[-2500:]}\nhost b:\n{wb.output()[-2500:]}"
    said = "\n".join(f"{e['kind']}: {e['reason']}" for e in events)
    assert (after["status"], after["attempt"], after["restarts"]) == ("running", 1, 0), f"{said}\n{logs}"
    assert not [e for e in events if e["kind"] == "retry"], events
    assert c.post(f"/api/v1/trainings/{tid}/cancel").status_code == 200
    wait_for(lambda: get()["status"] in FINAL, 300, "the cancel", 0.5)
