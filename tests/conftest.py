"""Shared fixtures.

PostgreSQL and Redis are real servers, started by `.ci/run` (or by a developer
with `.ci/services.sh`) and named by GPUFLEET_TEST_DATABASE_URL and
GPUFLEET_TEST_REDIS_URL. Outside CI a test that needs one is skipped when its
URL is unset; in CI (CI=true) a missing server fails the run instead, so the
suite never passes by skipping them silently.

Each PostgreSQL test gets a database of its own, copied from a template the
session migrates once and dropped after the test, so no test sees another's rows
and several runs can share one server.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from gpufleet.config import Settings, load_settings, reset_settings_cache
from support.templates import copy_sqlite, migrated_sqlite

# The fleet helpers' fixtures (workers, scheduler, live_api, ...) for every folder.
pytest_plugins = ["support.fleet"]

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def _need(var: str) -> str:
    val = os.environ.get(var)
    if not val:
        if IN_CI:
            pytest.fail(f"{var} is not set: .ci/run must start the server before the tests")
        pytest.skip(f"{var} not set (start the services with .ci/services.sh)")
    return val


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    # No test reads the developer's own configuration or data dir.
    for key in list(os.environ):
        if key.startswith("GPUFLEET_") and not key.startswith("GPUFLEET_TEST_"):
            monkeypatch.delenv(key, raising=False)
    monkeypatch.delenv("CREDENTIALS_DIRECTORY", raising=False)  # systemd's: secrets as files
    monkeypatch.setenv("GPUFLEET_DATA_DIR", str(tmp_path / "gpufleet-data"))
    # Apps built in the tests run in single-user mode (loopback callers are the admin `local`) unless a
    # test asks for sign-in (auth="on", the product's default); tests of sign-in and of local accounts do.
    monkeypatch.setenv("GPUFLEET_AUTH", "off")
    # No client in a test finds a server of this machine's through its socket by chance.
    monkeypatch.setenv("GPUFLEET_UNIX_SOCKET", str(tmp_path / "no-server.sock"))
    # Starlette's TestClient sends `Host: testserver`; a server without sign-in
    # answers only to loopback names and the ones listed here. Tests of a real
    # `serve` start it without this variable.
    monkeypatch.setenv("GPUFLEET_ALLOWED_HOSTS", '["testserver"]')
    # Workers keep no warm launchers (each costs a torch import on a loaded machine); the pool's tests ask.
    monkeypatch.setenv("GPUFLEET_WARM_POOL_SIZE", "0")
    # A server started here traces no recipe and loads no torch ahead of its first estimate (about 6 s of
    # CPU per start, in three processes); the tests of the warm-up ask for it.
    monkeypatch.setenv("GPUFLEET_ESTIMATE_WARM", "false")
    # The test PostgreSQL and Redis take connections without a password; a worker refuses members' code
    # then (the tests of that refusal turn this off).
    monkeypatch.setenv("GPUFLEET_ALLOW_SERVICES_WITHOUT_PASSWORD", "true")
    reset_settings_cache()
    yield
    reset_settings_cache()


@pytest.fixture(scope="session")
def pg_server_url() -> str:
    return _need("GPUFLEET_TEST_DATABASE_URL")


@pytest.fixture(scope="session")
def pg_control() -> tuple[str, str]:
    """pg_ctl and the data directory of the test server (to stop and start it), as .ci/services.sh exports."""
    return _need("GPUFLEET_TEST_PG_CTL"), _need("GPUFLEET_TEST_PG_DATA")


@contextmanager
def _pg_database(server_url: str, template: str | None = None) -> Iterator[str]:
    """A database of its own on the test server, empty or a copy of ``template``; dropped afterwards."""
    url = make_url(server_url)
    name = f"gpufleet_t_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    # pre-ping: tests restart the server (outage tests); teardown must reconnect.
    admin = create_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT", pool_pre_ping=True)
    with admin.connect() as conn:
        # FILE_COPY: a copy of the small template's files in half the time of WAL_LOG (the default since
        # PostgreSQL 15), whose checkpoint costs nothing on a server run with fsync off.
        conn.execute(text(f'CREATE DATABASE "{name}"'
                          + (f' TEMPLATE "{template}" STRATEGY FILE_COPY' if template else "")))
    try:
        yield url.set(database=name).render_as_string(hide_password=False)
    finally:
        from gpufleet.db.session import forget_engines

        forget_engines()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def fresh_pg_url(pg_server_url: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test."""
    with _pg_database(pg_server_url) as url:
        yield url


@pytest.fixture(scope="session")
def pg_template(pg_server_url: str) -> Iterator[str]:
    """A database upgraded to head once for the session, that ``fresh_migrated_pg_url`` copies.

    PostgreSQL copies a template's files (``CREATE DATABASE … TEMPLATE``) in a fraction of what
    running the 18 migrations costs each test that starts a fleet; the migrations are tested in
    tests/db/. Nothing stays connected to it, as a copy requires.
    """
    from gpufleet.db.session import get_engine, upgrade_database

    with _pg_database(pg_server_url) as url:
        upgrade_database(load_settings(database_url=url, data_dir=Path("/tmp")))
        get_engine.cache_clear()
        name = make_url(url).database
        admin = create_engine(make_url(pg_server_url).set(database="postgres"), isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                              "WHERE datname = :name AND pid <> pg_backend_pid()"), {"name": name})
        admin.dispose()
        yield name


@pytest.fixture
def fresh_migrated_pg_url(pg_server_url: str, pg_template: str) -> Iterator[str]:
    """A PostgreSQL database of one test's own, at head: a copy of the session's template."""
    with _pg_database(pg_server_url, pg_template) as url:
        yield url


@pytest.fixture(scope="session")
def redis_url() -> str:
    return _need("GPUFLEET_TEST_REDIS_URL")


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """Embedded-default settings on a temporary data dir."""
    return load_settings(data_dir=tmp_path / "gpufleet-data")


@pytest.fixture
def sim_settings(tmp_path: Path) -> Settings:
    """Embedded settings with four simulated H100s, all NVLink-connected."""
    return load_settings(
        data_dir=tmp_path / "gpufleet-data",
        simulate="4xH100-80GB",
        simulate_topology="nvlink-all",
        host_name="sim-host",
    )


@pytest.fixture
def pg_migrated_url(fresh_migrated_pg_url: str) -> str:
    """A PostgreSQL database at head of this test's own (``fresh_migrated_pg_url``), dropped after it.

    Nothing a test commits reaches another test: each starts from the migrations' rows alone, and
    what it wrote goes with its database, whether the test wrote it or a server, worker or CLI it
    started in another process did. A copy of the template costs about a tenth of a second.
    """
    return fresh_migrated_pg_url


@pytest.fixture(scope="session")
def sqlite_template() -> Path:
    """An embedded database upgraded to head once for the session; each test gets a copy."""
    return migrated_sqlite()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    """Settings on a migrated database of this test's own: a copy of the embedded SQLite file, then a
    copy of the PostgreSQL template (``pg_migrated_url``); neither outlives the test."""
    if request.param == "sqlite":
        s = load_settings(data_dir=tmp_path / "gpufleet-data")
        copy_sqlite(request.getfixturevalue("sqlite_template"), s.data_dir)
        return s
    url = request.getfixturevalue("pg_migrated_url")
    return load_settings(data_dir=tmp_path / "gpufleet-data", database_url=url)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def cli_db(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The database the CLI talks to, through the environment as a user sets it."""
    if request.param == "postgresql":
        monkeypatch.setenv("GPUFLEET_DATABASE_URL", request.getfixturevalue("pg_migrated_url"))
    reset_settings_cache()
    return "u" + uuid.uuid4().hex[:8]


# Sign-in on, people with roles, the product's app: the set the tests of roles share.


@pytest.fixture
def on_settings(db_settings: Settings) -> Settings:
    """Sign-in required (the product's default), on both databases."""
    from support.people import SECRET

    return db_settings.model_copy(update={"auth": "on", "secret_key": SECRET})


@pytest.fixture
def people(on_settings: Settings):  # support.people.People
    """An admin, members and a viewer with tokens, their names unique to this test."""
    from support.people import make_people

    return make_people(on_settings, suffix="-" + uuid.uuid4().hex[:6])


@pytest.fixture
def app_client(on_settings: Settings) -> Iterator:
    """The product's app (every router, the auth gate) on ``on_settings``."""
    from fastapi.testclient import TestClient

    from gpufleet.api.app import create_app

    with TestClient(create_app(on_settings)) as c:
        yield c


@pytest.fixture
def standin_rank() -> Iterator[subprocess.Popen]:
    """A real, idle process to stand for a training's rank: simulated NVML entries and NVML test doubles
    name its pid, and entries of dead pids are ignored."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield p
    p.kill()
    p.wait()
