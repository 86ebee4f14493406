"""A notebook session released when idle (warning first), and a shell session ended by its time limit.

A real worker with its telemetry agent (the GPU history the idle rule reads)
and the scheduler loop, on a simulated fleet. A session's own process runs
nothing on its simulated GPU, as on a real one: the GPU is busy while the
owner runs something there (a process of the owner's account), and idle once
that ends, as a real GPU under a forgotten notebook reads. The Jupyter server is real.
"""

from __future__ import annotations

import subprocess
import uuid
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from fastapi.testclient import TestClient
from support.fleet import make_settings, register, wait_for

from gpufleet.api.app import create_app
from gpufleet.db.session import session_scope
from gpufleet.devices import simstate
from gpufleet.interactive.notebook import may_open, notebook_target
from gpufleet.telemetry.live import read_live_samples
from gpufleet.telemetry.prometheus import render
from gpufleet.users.runas import for_owner

from .test_worker import events, session, wait_session

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]


@pytest.fixture
def worker_with_agent(tmp_path):
    from gpufleet.jobs.embedded import settings_env, worker_command
    from gpufleet.jobs.procs import kill_orphans

    started = []

    def start(settings):
        log = open(tmp_path / "worker-agent.log", "ab")  # noqa: SIM115 - closed below
        proc = subprocess.Popen(worker_command(settings.host_name, agent=True) + ["--concurrency", "4"],
                                env=settings_env(settings), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        started.append((proc, log, settings))
        return tmp_path / "worker-agent.log"

    yield start
    for proc, log, settings in started:
        proc.kill()
        proc.wait(10)
        log.close()
        kill_orphans(settings, settings.host_name)


def test_an_idle_notebook_is_warned_then_released_and_a_shell_ends_at_its_time_limit(
        tmp_path, request, worker_with_agent, scheduler):
    s = make_settings(tmp_path, "postgresql", request, simulate="2xH100-80GB", sample_interval_s=0.5,
                      session_idle_action="stop", session_idle_window_s=8.0, session_idle_grace_s=4.0,
                      session_idle_threshold_percent=5.0)
    register(s)
    log = worker_with_agent(s)
    scheduler(s)
    c = TestClient(create_app(s))
    r = c.post("/api/v1/sessions", json={"gpus": 1, "hours": 1, "jupyter": True})
    assert r.status_code == 201, r.text
    nb = r.json()["id"]
    body = wait_session(c, "", nb, ("running", "failed", "stopped"), 240)
    assert body["status"] == "running" and body["url"] == f"/sessions/{nb}/", (body, log.read_text())
    # The notebook answers on loopback under its base URL, with the token gpufleet keeps, and only with it.
    with session_scope(s) as sess:
        target = notebook_target(sess, uuid.UUID(nb))
    assert target is not None and target.address == "127.0.0.1" and target.base_url == f"/sessions/{nb}/"
    assert may_open(target.owner, "member", target) and not may_open("someone-else", "member", target)
    status = f"http://127.0.0.1:{target.port}{target.base_url}api/status"
    assert httpx.get(status, headers={"Authorization": f"token {target.token}"}).status_code == 200
    assert httpx.get(status).status_code == 403
    # Processes of the owner's account on the session's GPU are the session's, not foreign; others' stay foreign.
    gpu = body["gpu_ids"][0]
    with session_scope(s) as sess:
        account = for_owner(sess, s.run_account, body["owner"]).name
    mine = simstate.add_foreign_process(s, gpu, 2**30, user=account, name="python")
    theirs = simstate.add_foreign_process(s, gpu, 2**30, user="someone-else", name="python")
    procs = wait_for(lambda: len(procs := {p.pid: p for g in read_live_samples(s) if g.index == gpu
                                           for p in g.processes if p.pid in (mine, theirs)}) == 2 and procs,
                     60, "both processes sampled")
    assert (procs[mine].foreign, str(procs[mine].training_id)) == (False, nb)
    assert procs[theirs].foreign and procs[theirs].training_id is None
    simstate.remove_foreign_process(s, theirs)  # the owner's own work goes on, keeping the GPU busy
    # The fleet's cards name the holder's kind; Prometheus counts running notebook sessions.
    live = c.get("/api/v1/system/metrics/live").json()
    assert live["trainings"][nb]["kind"] == "session" and live["trainings"][nb]["owner"] == body["owner"]
    assert 'gpufleet_sessions{mode="jupyter",state="running"} 1.0' in render(s).decode()
    # A shell session whose time limit (about 3 s) runs out ends by it, whatever its GPU does.
    r = c.post("/api/v1/sessions", json={"gpus": 1, "hours": 3 / 3600})
    assert r.status_code == 201, r.text
    sh = r.json()["id"]
    ended = wait_session(c, "", sh, ("stopped", "failed"), 240)
    assert (ended["status"], ended["end_reason"]) == ("stopped", "time_limit"), ended
    # Busy GPU (the owner's process works on it): the notebook is not idle, however long past the window it runs.
    ready = wait_for(lambda: [e for e in events(c, "", nb) if e["kind"] == "session_ready"], 30, "ready event")
    assert ready[0]["data"]["url"] == f"/sessions/{nb}/"
    began = datetime.fromisoformat(body["ready_at"])
    wait_for(lambda: datetime.now(UTC) - began > timedelta(seconds=s.session_idle_window_s + 3), 60,
             "the notebook to have run longer than the idle window")
    assert session(c, "", nb)["idle_warned_at"] is None
    # The owner's work ends; the notebook alone runs nothing: the GPU reads idle with no switch thrown.
    simstate.remove_foreign_process(s, mine)
    ended = wait_session(c, "", nb, ("stopped", "failed"), 120)
    assert (ended["status"], ended["end_reason"]) == ("stopped", "idle"), ended
    kinds = [e["kind"] for e in events(c, "", nb)]
    assert "session_idle_warning" in kinds, kinds
    stopped = wait_for(lambda: [e for e in events(c, "", nb) if e["kind"] == "session_stopped"], 30, "stopped event")
    assert kinds.index("session_idle_warning") < [e["kind"] for e in events(c, "", nb)].index("session_stopped")
    assert stopped[0]["data"]["reason"] == "idle"
    # Its GPU is released: the reservation ended with the session.
    assert c.get(f"/api/v1/trainings/{nb}").json()["gpus"][0]["released_at"] is not None

    # Its held GPU time is in usage, as any training's.
    usage = c.get("/api/v1/usage", params={"by": "training"}).json()
    held = [r for r in usage["data"] if r["name"] == nb]
    assert held and held[0]["gpu_seconds_held"] > 0, usage
