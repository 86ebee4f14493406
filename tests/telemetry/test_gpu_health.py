"""A GPU with a fatal XID, a pending row remap or uncorrectable ECC errors leaves scheduling, with the reason,
until it recovers or an admin clears it; injected through the simulated NVML, read by the real sampler."""

from __future__ import annotations

import uuid

import pytest
from fastapi.testclient import TestClient
from support.people import SECRET, bearer, make_people
from sqlalchemy import select

from gpufleet.api.app import create_app
from gpufleet.db.models import GPU, Host
from gpufleet.db.session import session_scope
from gpufleet.devices import simstate
from gpufleet.devices.backend import device_backend
from gpufleet.devices.simhealth import set_row_remaps
from gpufleet.scheduling.scheduler import _snapshot
from gpufleet.telemetry.gpu_health import HealthWatch
from gpufleet.telemetry.inventory import register_host
from gpufleet.telemetry.sampler import NvmlSampler


@pytest.fixture
def host(db_settings):
    s = db_settings.model_copy(update={"auth": "on", "secret_key": SECRET, "simulate": "2xH100-80GB",
                                       "host_name": "health-" + uuid.uuid4().hex[:8]})
    register_host(s)
    sampler = NvmlSampler(s, s, device_backend(s))
    yield s, sampler, HealthWatch(s)
    sampler.close()


def _round(s, sampler, watch) -> dict[int, tuple[str, str | None]]:
    sampler._last_slow = float("-inf")  # a slow round: ECC and remapped rows are read again
    watch.check(sampler.sample())
    with session_scope(s) as sess:
        rows = sess.execute(select(GPU.index, GPU.status, GPU.status_reason).join(Host, Host.id == GPU.host_id)
                            .where(Host.name == s.host_name)).all()
    return {i: (st, why) for i, st, why in rows}


def _usable(s) -> set[int]:
    with session_scope(s) as sess:
        hid = sess.scalar(select(Host.id).where(Host.name == s.host_name))
        return _snapshot(sess, "used").usable.get(hid, set())


def test_faults_take_a_gpu_out_until_it_recovers_or_an_admin_clears_it(host):
    s, sampler, watch = host
    assert _round(s, sampler, watch) == {0: ("ok", None), 1: ("ok", None)}
    simstate.inject_xid(s, 0, 13)  # a program's own fault (graphics engine exception): not the GPU's
    simstate.inject_xid(s, 1, 79)
    rows = _round(s, sampler, watch)
    assert rows[0] == ("ok", None) and rows[1] == ("unhealthy", "health: XID 79 (fell off the bus)")
    assert _usable(s) == {0}
    set_row_remaps(s, 0, uncorrectable=1, pending=True)
    assert _round(s, sampler, watch)[0] == ("unhealthy", "health: a row remap is pending (reset the GPU)")
    set_row_remaps(s, 0, uncorrectable=1, pending=False)  # the GPU was reset: the remap is done
    assert _round(s, sampler, watch)[0] == ("ok", None)
    simstate.set_ecc_errors(s, 0, uncorrected=2)
    assert _round(s, sampler, watch)[0] == ("unhealthy", "health: 2 uncorrectable ECC errors")
    simstate.set_ecc_errors(s, 0, uncorrected=0)
    rows = _round(s, sampler, watch)
    assert rows[0] == ("ok", None) and rows[1][0] == "unhealthy"  # an XID's mark stays
    register_host(s)  # the agent restarts: the mark outlives it
    assert _round(s, sampler, watch)[1] == ("unhealthy", "health: XID 79 (fell off the bus)")
    assert _usable(s) == {0}

    team = make_people(s, suffix="-" + uuid.uuid4().hex[:6])
    with TestClient(create_app(s)) as api:
        url = f"/api/v1/system/gpus/{s.host_name}/1/clear-health"
        gpus = api.get("/api/v1/system/gpus", headers=bearer(team.vic)).json()["data"]
        shown = {g["index"]: g for g in gpus if g["host"] == s.host_name}[1]
        assert (shown["status"], shown["status_reason"]) == ("unhealthy", "health: XID 79 (fell off the bus)")
        assert api.post(url, headers=bearer(team.alice)).status_code == 403
        assert _round(s, sampler, watch)[1][0] == "unhealthy"  # nothing written by the refusal
        r = api.post(url, headers=bearer(team.admin))
        assert r.status_code == 200 and r.json()["cleared"] == "XID 79 (fell off the bus)", r.text
        again = api.post(url, headers=bearer(team.admin))  # nothing left to clear: a no-op
        assert again.status_code == 200 and again.json()["cleared"] is None and again.json()["status"] == "ok"
        assert api.post(f"/api/v1/system/gpus/{s.host_name}/7/clear-health",
                        headers=bearer(team.admin)).status_code == 404
    assert _round(s, sampler, watch)[1] == ("ok", None)  # no new XID: the agent leaves it in
    assert _usable(s) == {0, 1}


def test_the_cli_shows_the_reason_and_only_an_admin_clears_it(host, tmp_path):
    import os
    import subprocess
    import sys

    from support.servers import serve_inprocess

    s, sampler, watch = host
    simstate.inject_xid(s, 0, 48)
    assert _round(s, sampler, watch)[0] == ("unhealthy", "health: XID 48 (double-bit ECC error)")
    team = make_people(s, suffix="-" + uuid.uuid4().hex[:6])
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}

    def cli(token: str, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "gpufleet.cli", *args], capture_output=True, text=True,
                              env={**env, "GPUFLEET_TOKEN": token, "GPUFLEET_SERVER": url, "COLUMNS": "250",
                                   "GPUFLEET_UNIX_SOCKET": str(tmp_path / "none.sock")}, timeout=120)

    with serve_inprocess(create_app(s)) as served:
        url = served.url
        shown = cli(team.vic, "gpus")
        assert shown.returncode == 0 and "XID 48 (double-bit ECC error)" in shown.stdout, shown.stdout + shown.stderr
        refused = cli(team.alice, "gpus", "clear-health", f"{s.host_name}:0")
        assert refused.returncode == 2 and "admin" in refused.stderr.lower(), refused.stderr
        bad = cli(team.admin, "gpus", "clear-health", "no-index")
        assert bad.returncode == 2 and "HOST:INDEX" in bad.stderr
        done = cli(team.admin, "gpus", "clear-health", f"{s.host_name}:0")
        assert done.returncode == 0 and "back in scheduling" in done.stdout, done.stdout + done.stderr
    assert _usable(s) == {0, 1}
