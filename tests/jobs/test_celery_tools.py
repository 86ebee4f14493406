"""Celery's own tools reach a gpufleet fleet: `celery -A gpufleet.jobs.celery_app …` and Flower's events."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from support.fleet import make_settings, register

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]


def _celery(settings, *args: str) -> subprocess.CompletedProcess:
    from gpufleet.jobs.embedded import settings_env

    celery = Path(sys.executable).with_name("celery")
    return subprocess.run([str(celery), "-A", "gpufleet.jobs.celery_app", *args], env=settings_env(settings),
                          capture_output=True, text=True, timeout=120)


def test_celery_inspect_and_worker_events(tmp_path, request, workers):
    s = make_settings(tmp_path, "postgresql", request)
    register(s)
    w = workers(s)
    name = f"gpufleet@{s.host_name}"
    from support.fleet import wait_for

    ping = wait_for(lambda: (r := _celery(s, "inspect", "ping", "-d", name, "--timeout", "3")).returncode == 0
                    and r, 90, "the worker to answer celery inspect ping", 1.0)
    assert "pong" in ping.stdout
    registered = _celery(s, "inspect", "registered", "-d", name, "--timeout", "5")
    assert registered.returncode == 0 and "gpufleet.run_training" in registered.stdout, registered
    active = _celery(s, "inspect", "active", "-d", name, "--timeout", "5")
    assert active.returncode == 0, active

    # What Flower listens to: worker heartbeats (and task events) on the broker.
    from gpufleet.jobs.celery_app import make_celery

    app = make_celery(s)
    seen: list[dict] = []
    with app.connection_for_read() as conn:
        recv = app.events.Receiver(conn, handlers={"*": seen.append})
        recv.capture(limit=20, timeout=30, wakeup=True)
    assert any(e.get("type") == "worker-heartbeat" and e.get("hostname") == name for e in seen), seen[:5]
    assert w.proc.poll() is None
