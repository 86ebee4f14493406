"""`gpufleet serve` as a newcomer runs it: a real process, a real port."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from support.fleet import wait_for
from support.servers import free_port, serve_env, serve_process

GPUFLEET = [sys.executable, "-m", "gpufleet.cli"]


def _loaded_torch(pid: int) -> bool:
    """Whether the process has torch's library mapped (imported torch)."""
    return "libtorch" in Path(f"/proc/{pid}/maps").read_text()


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"GPUFLEET_GPU__MODE": "turbo"}, "GPUFLEET_GPU__MODE"),
        ({"GPUFLEET_SIMULATE": "4xH100-80"}, "GPUFLEET_SIMULATE"),
        (
            {
                "GPUFLEET_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
                # A server on PostgreSQL signs people in, so it needs a real secret.
                "GPUFLEET_SECRET_KEY": "Jx4q-7TnV0pLr2sWcY9eHb1KmUa8ZgQd3FoXi6NtB5yE",
            },
            "GPUFLEET_DATABASE_URL: cannot connect",
        ),
    ],
)
def test_bad_configuration_stops_serve_with_one_line(tmp_path: Path, extra: dict, named: str) -> None:
    proc = subprocess.run(
        [*GPUFLEET, "serve", "--port", str(free_port())],
        env=serve_env(tmp_path / "data", **extra),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    lines = [l for l in proc.stderr.strip().splitlines() if l.strip()]
    assert len(lines) == 1, proc.stderr
    assert named in lines[0]
    assert "Traceback" not in proc.stderr + proc.stdout


@pytest.mark.slow
def test_serve_on_a_simulated_fleet(tmp_path: Path) -> None:
    # The product's default warm-up on (the tests' environment turns it off).
    with serve_process(tmp_path / "data", GPUFLEET_SIMULATE="4xH100-80GB", GPUFLEET_HOST_NAME="sim-a",
                       GPUFLEET_ESTIMATE_WARM="true", ready_timeout=90) as srv:
        base = srv.url
        # Ready means warm: torch was loaded before the first answer, so none waits on its import.
        assert _loaded_torch(srv.proc.pid)
        gpus = httpx.get(f"{base}/api/v1/system/gpus", timeout=10).json()
        assert gpus["count"] == 4 and gpus["simulated"] is True
        assert all("H100" in g["name"] and g["simulated"] for g in gpus["data"])
        assert {g["host"] for g in gpus["data"]} == {"sim-a"}
        # The embedded agent samples the GPUs: live readings and availability appear.
        def live_gpus() -> list[dict]:
            data = httpx.get(f"{base}/api/v1/system/gpus", timeout=10).json()["data"]
            return data if all(g["live"] and g["live"]["utilization"] is not None for g in data) else []

        deadline = time.monotonic() + 30
        while not (data := live_gpus()):
            assert time.monotonic() < deadline, "no live samples within 30 s"
            time.sleep(0.5)
        assert all(g["live"]["memory_total"] == g["memory_total"] for g in data)
        assert all(g["availability"]["state"] == "free" for g in data)
        topo = httpx.get(f"{base}/api/v1/system/topology", timeout=10).json()
        assert topo["hosts"][0]["matrix"][0][1].startswith("NV")
        # The embedded database was created and upgraded by serve itself.
        assert (tmp_path / "data" / "gpufleet.db").exists()
        # Warming up, it traces the recipes' defaults in its estimate pool.
        wait_for(lambda: list((tmp_path / "data" / "estimates").glob("*.json")), 120, "the recipes' traces", 0.5)
    out = srv.log_tail(1 << 20)
    assert srv.url in out
    assert "4 GPU(s) (simulated)" in out
    # Start-up says what is real and nothing else (library chatter, NVLink on NVLink GPUs).
    logs = out + "".join(p.read_text() for p in (tmp_path / "data" / "logs").glob("*.log"))
    for noise in ("alembic.runtime.plugins", "Context impl", "No hostname was supplied",
                  "superuser privileges", "Function Not Found", "nvlink is not available"):
        assert noise not in logs, (noise, logs)
    assert "Running upgrade" in logs


@pytest.mark.slow
def test_serve_without_gpus_says_where_trainings_run(tmp_path: Path) -> None:
    with serve_process(tmp_path / "data", GPUFLEET_SIMULATE="", ready_timeout=90) as srv:
        if httpx.get(f"{srv.url}/api/v1/system/gpus", timeout=10).json()["count"]:
            pytest.skip("this machine has GPUs")
        r = httpx.post(f"{srv.url}/api/v1/trainings", json={"name": "cpu-box", "recipe": "mlp"}, timeout=120)
        assert r.status_code == 201, r.text
        # Without the warm-up (the tests' GPUFLEET_ESTIMATE_WARM=false) the first training's estimate
        # loaded torch (tests/api/test_estimate_cache.py: nothing starts it ahead), and traced no recipe.
        assert _loaded_torch(srv.proc.pid)
        assert not list((tmp_path / "data" / "estimates").glob("*.json"))
        log = srv.log_tail(1 << 20)
        out = " ".join(log.split())
    # In a log file a banner line stays whole (it is folded only on a terminal).
    assert any("no GPUs found (trainings sent here wait for a GPU host;" in line
               and "GPUFLEET_SIMULATE=4xH100-80GB simulates a fleet)" in line for line in log.splitlines()), log
    # It waits for a GPU host, as the banner says; the CPU path is the local one.
    assert r.json()["status"] == "queued"
    assert "no GPUs found (trainings sent here wait for a GPU host;" in out, out
    assert "gpufleet train --local --devices cpu" in out


@pytest.mark.postgres
@pytest.mark.parametrize("process", ["serve", "worker"])
def test_serve_and_worker_on_a_database_without_the_schema_say_to_upgrade_it(
        tmp_path: Path, fresh_pg_url: str, process: str) -> None:
    command = ["serve", "--port", str(free_port())] if process == "serve" else ["worker", "--no-agent"]
    # Each process of a fleet refuses a shared database at another schema with
    # the same line; none of them upgrades it on its own, none shows a traceback.
    proc = subprocess.run(
        [*GPUFLEET, *command],
        env=serve_env(tmp_path / "data", GPUFLEET_DATABASE_URL=fresh_pg_url,
                      GPUFLEET_SECRET_KEY="Jx4q-7TnV0pLr2sWcY9eHb1KmUa8ZgQd3FoXi6NtB5yE"),
        capture_output=True, text=True, timeout=120)
    said = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 2, said
    assert "the database schema is at nothing" in said and "run `gpufleet db upgrade` first" in said, said
    assert "Traceback" not in said


def test_a_second_serve_on_a_port_in_use_says_so_before_touching_anything(tmp_path: Path) -> None:
    with serve_process(tmp_path / "first", GPUFLEET_EMBEDDED_WORKER="false") as srv:
        second = tmp_path / "second"
        for extra in ([], ["--check"]):
            proc = subprocess.run([*GPUFLEET, "serve", "--port", str(srv.port), *extra],
                                  env=serve_env(second), capture_output=True, text=True, timeout=60)
            said = proc.stdout + proc.stderr
            assert proc.returncode == 2, said
            assert f"cannot listen on 127.0.0.1:{srv.port}" in said and "already running" in said, said
            assert "listening on" not in said and "Traceback" not in said, said
            # Nothing was prepared for a server that cannot start: no data dir, no database.
            assert not second.exists()
        assert httpx.get(f"{srv.url}/healthz", timeout=10).status_code == 200
        # No access log unless asked for.
        assert '"GET /healthz' not in srv.log_tail(1 << 20)
    # Once the port is free, --check says so and starts nothing.
    proc = subprocess.run([*GPUFLEET, "serve", "--port", str(srv.port), "--check"],
                          env=serve_env(second), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and f"127.0.0.1:{srv.port} is free" in proc.stdout, proc.stdout + proc.stderr


def test_the_access_log_writes_a_line_per_request(tmp_path: Path) -> None:
    with serve_process(tmp_path / "data", GPUFLEET_EMBEDDED_WORKER="false", GPUFLEET_ACCESS_LOG="true") as srv:
        assert httpx.get(f"{srv.url}/api/v1/system/gpus?wanted=1", timeout=10).status_code == 200
        deadline = time.monotonic() + 30
        while '"GET /api/v1/system/gpus?wanted=1 HTTP/1.1" 200' not in srv.log_tail(1 << 20):
            assert time.monotonic() < deadline, srv.log_tail()
            time.sleep(0.2)
