"""A fleet in the database, the API, real workers: helpers and fixtures for every test folder.

A pytest plugin (``tests/conftest.py`` loads it), so its fixtures reach every
folder; its helpers are imported: ``from support.fleet import make_settings``.

Hosts and GPUs are registered by the real inventory code from a simulated
fleet spec; workers are real Celery worker processes (``python -m
gpufleet.jobs.worker``), on the embedded filesystem broker or on Redis.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from gpufleet.config import Settings, load_settings
from gpufleet.db.session import upgrade_database
from support.servers import serve_inprocess
from support.templates import copy_sqlite, migrated_sqlite

TINY_SAE = {
    "max_steps": 6,
    "global_batch_size": 16,
    "checkpoint_every": 2,
    "log_every": 1,
}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def make_settings(tmp_path: Path, backend: str, request: pytest.FixtureRequest | None = None, **kw) -> Settings:
    """Embedded (SQLite + filesystem broker) or fleet (PostgreSQL + Redis) settings."""
    base = dict(
        data_dir=tmp_path / "data",
        simulate=kw.pop("simulate", "2xH100-80GB"),
        host_name=kw.pop("host_name", unique("host")),
        lease_s=kw.pop("lease_s", 3.0),
        create_rate_per_minute=10000,
        max_queued_per_user=100000,
        auth="off",
        # Warm launchers cost CPU at every worker start; the tests of the pool ask for it.
        warm_pool_size=0,
    )
    base.update(kw)
    if backend == "postgresql":
        assert request is not None
        # A database of the test's own, at head: a queue other tests left behind (hundreds of
        # trainings the fuzzer and the API tests created) must not decide what this
        # test's scheduler passes see. Hosts of one test share it.
        base["database_url"] = request.getfixturevalue("fresh_migrated_pg_url")
        base["redis_url"] = request.getfixturevalue("redis_url")
        return load_settings(**base)
    s = load_settings(**base)
    if s.database_url is None and not (s.data_dir / "gpufleet.db").exists():
        copy_sqlite(migrated_sqlite(), s.data_dir)  # the migrations, run once per test process
    else:
        upgrade_database(s)  # a second host on this data dir, or a database the test named
    return s


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=[pytest.mark.postgres, pytest.mark.redis])])
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def fleet_settings(tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> Settings:
    return make_settings(tmp_path, backend, request)


def api_app(settings: Settings) -> FastAPI:
    """The trainings router on its own app, with the real auth dependencies."""
    from gpufleet.api.routes.trainings import router

    app = FastAPI()
    app.state.settings = settings
    app.include_router(router)
    return app


@pytest.fixture
def client_for() -> Iterator[Callable[[Settings], TestClient]]:
    clients: list[TestClient] = []

    def make(settings: Settings) -> TestClient:
        c = TestClient(api_app(settings))
        clients.append(c)
        return c

    yield make
    for c in clients:
        c.close()


# Hosts registered by the running test: their heartbeat is kept fresh, as the
# agent of a real host keeps it (a host silent for 30 s is offline and gets no
# training), so a test that runs no agent does not depend on being fast.
_beating: list[Settings] = []
_beat_lock = threading.Lock()
_write_lock = threading.Lock()  # held while the beat thread writes one host's heartbeat
_beater: threading.Thread | None = None


def register(settings: Settings):
    from gpufleet.jobs.worker import ensure_host

    host_id = ensure_host(settings)
    with _beat_lock:
        _beating.append(settings)
        _start_heartbeats()
    return host_id


@contextmanager
def heartbeats_paused(settings: Settings) -> Iterator[None]:
    """No heartbeat is written for ``settings``' host meanwhile: a test that counts its own database
    sessions does not count the beat thread's (a write every 5 s, which a slow request can meet)."""
    with _beat_lock:
        paused = [s for s in _beating if s is settings]
        _beating[:] = [s for s in _beating if s is not settings]
    with _write_lock:
        pass  # a beat already writing ends before the caller goes on
    try:
        yield
    finally:
        with _beat_lock:
            _beating.extend(paused)


def _start_heartbeats() -> None:
    """One daemon thread for the whole run, started by the first ``register``."""
    global _beater
    if _beater is not None:
        return
    from sqlalchemy import update

    from gpufleet.db.models import Host
    from gpufleet.db.session import write_session
    from gpufleet.db.types import utcnow

    def beat() -> None:
        while True:
            time.sleep(5.0)
            with _beat_lock:
                hosts = list(_beating)
            for s in hosts:
                with _write_lock:
                    with _beat_lock:
                        if not any(b is s for b in _beating):
                            continue  # paused or forgotten meanwhile
                    try:
                        # Only the time: a host the test marked offline (or drained) stays so.
                        with write_session(s) as sess:
                            sess.execute(update(Host).where(Host.name == s.host_name)
                                         .values(last_heartbeat=utcnow()))
                    except Exception:  # noqa: BLE001 - a test may stop its database on purpose
                        pass

    _beater = threading.Thread(target=beat, name="test-heartbeats", daemon=True)
    _beater.start()


@pytest.fixture(autouse=True)
def _forget_registered_hosts() -> Iterator[None]:
    """A test's hosts beat only while it runs."""
    yield
    with _beat_lock:
        _beating.clear()


class WorkerProc:
    def __init__(self, settings: Settings, log: Path, env: dict[str, str] | None = None):
        from gpufleet.jobs.embedded import settings_env, worker_command

        self.settings = settings
        self.log = log
        self._fh = open(log, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            worker_command(settings.host_name, agent=False) + ["--concurrency", "8"],
            env={**settings_env(settings), **(env or {})},
            stdout=self._fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self._fh.close()

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Callable[[Settings], WorkerProc]]:
    started: list[WorkerProc] = []

    def start(settings: Settings, env: dict[str, str] | None = None) -> WorkerProc:
        w = WorkerProc(settings, tmp_path / f"worker-{len(started)}.log", env)
        started.append(w)
        return w

    yield start
    for w in started:
        w.stop()
    # Launchers are in their own groups: make sure no test leaves one behind.
    from gpufleet.jobs.procs import kill_orphans

    for w in started:
        kill_orphans(w.settings, w.settings.host_name)


@pytest.fixture
def scheduler() -> Iterator[Callable[[Settings], threading.Thread]]:
    stops: list[tuple[threading.Event, threading.Thread]] = []

    def start(settings: Settings) -> threading.Thread:
        from gpufleet.jobs.scheduler_loop import start as start_loop

        stop = threading.Event()
        t = start_loop(settings, stop)
        stops.append((stop, t))
        return t

    yield start
    for stop, t in stops:
        stop.set()
        t.join(10)


def wait_for(fn: Callable[[], object], timeout: float, what: str, every: float = 0.1):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value {last!r}")


FINAL = ("succeeded", "failed", "cancelled", "reclaimed", "pruned")


def get_training(c: TestClient, tid: str) -> dict:
    r = c.get(f"/api/v1/trainings/{tid}")
    assert r.status_code == 200, r.text
    return r.json()


def wait_status(c: TestClient, tid: str, statuses: tuple[str, ...], timeout: float) -> dict:
    """The training once its status is one of ``statuses``."""
    return wait_for(lambda: (b := get_training(c, tid))["status"] in statuses and b, timeout,
                    f"status in {statuses}", 0.2)


def get_events(c: TestClient, tid: str) -> list[dict]:
    return c.get(f"/api/v1/trainings/{tid}/events").json()["data"]


def pids_in_group(pgid: int) -> list[int]:
    from gpufleet.jobs.procs import group_members

    return group_members(pgid)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _uvicorn_servers(make_app: Callable[[Settings], FastAPI]) -> Iterator[Callable[[Settings], str]]:
    """Start ``make_app(settings)`` under uvicorn per call (returns its base URL); stop them after."""
    with ExitStack() as stack:
        yield lambda settings: stack.enter_context(serve_inprocess(make_app(settings))).url


@pytest.fixture
def live_api() -> Iterator[Callable[[Settings], str]]:
    """A real uvicorn server with the trainings router, on a free port; returns its base URL."""
    yield from _uvicorn_servers(api_app)


@pytest.fixture
def product_api() -> Iterator[Callable[[Settings], str]]:
    """``create_app`` (every router, the auth gate) under uvicorn on a free port; returns its URL."""
    from gpufleet.api.app import create_app

    yield from _uvicorn_servers(create_app)
