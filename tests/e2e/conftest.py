"""A real `gpufleet serve` on a simulated fleet, and Debian's Chromium driven by Playwright.

The server runs as a subprocess exactly as a user starts it (embedded default:
SQLite, embedded worker and agent) with GPUFLEET_SIMULATE=4xH100-80GB, a
temporary data dir and a free port. The browser is /usr/bin/chromium from
Debian's package (Playwright's own browser download does not work here).
Outside CI the browser tests are skipped when that browser is missing; in CI
they fail instead, so they never pass by not running.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path(os.environ.get("GPUFLEET_E2E_CHROMIUM", "/usr/bin/chromium"))
STATIC_INDEX = REPO / "backend" / "gpufleet" / "static" / "index.html"
SCREENSHOTS = REPO / "test-artifacts" / "screenshots"
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _need(ok: bool, why: str) -> None:
    if ok:
        return
    if IN_CI:
        pytest.fail(why)
    pytest.skip(why)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sources_newer_than_build() -> bool:
    built = STATIC_INDEX.stat().st_mtime
    src = REPO / "frontend"
    for path in [*src.joinpath("src").rglob("*"), src / "index.html", src / "vite.config.ts"]:
        if path.is_file() and path.stat().st_mtime > built:
            return True
    return False


@pytest.fixture(scope="session")
def dashboard_built() -> Path:
    """The built dashboard; rebuilt when the sources changed and npm is set up."""
    has_modules = (REPO / "frontend" / "node_modules").is_dir()
    if has_modules and (not STATIC_INDEX.is_file() or _sources_newer_than_build()):
        subprocess.run(["npm", "run", "build"], cwd=REPO / "frontend", check=True, capture_output=True, timeout=300)
    _need(STATIC_INDEX.is_file(), "the dashboard is not built: run scripts/build-frontend.sh")
    return STATIC_INDEX.parent


@dataclass(frozen=True)
class Server:
    url: str
    log: Path
    data_dir: Path
    # Stops the server now (its whole process group); safe to call twice.
    stop: Callable[[], None] = field(default=lambda: None, compare=False)

    def log_tail(self, n: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""


def _server_env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_") or k.startswith("GPUFLEET_TEST_")}
    env.update(
        GPUFLEET_SIMULATE="4xH100-80GB",
        GPUFLEET_SIMULATE_TOPOLOGY="nvlink-all",
        GPUFLEET_HOST_NAME="sim-host",
        GPUFLEET_DATA_DIR=str(data_dir),
        PYTHONUNBUFFERED="1",
        **extra,
    )
    return env


def _gpufleet() -> list[str]:
    exe = Path(sys.executable).with_name("gpufleet")
    return [str(exe)] if exe.exists() else [sys.executable, "-c", "from gpufleet.cli import main; main()"]


@contextmanager
def _serve(data_dir: Path, port: int | None = None, **extra_env: str) -> Iterator[Server]:
    """`gpufleet serve` on a loopback port (a free one unless given), as a user starts it;
    stopped with its process group."""
    port = port or _free_port()
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = data_dir / "serve.log"
    log = open(log_path, "ab")  # noqa: SIM115 - closed below; a restart appends
    proc = subprocess.Popen(
        [*_gpufleet(), "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=_server_env(data_dir, **extra_env),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: the worker stops with it
    )
    def stop() -> None:
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=10)

    srv = Server(f"http://127.0.0.1:{port}", log_path, data_dir, stop)
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"gpufleet serve exited ({proc.returncode}):\n{srv.log_tail(4000)}")
            try:
                if httpx.get(f"{srv.url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"gpufleet serve did not answer in 90 s:\n{srv.log_tail(4000)}")
            time.sleep(0.3)
        yield srv
    finally:
        stop()
        log.close()


@pytest.fixture(scope="session")
def server(dashboard_built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A live `gpufleet serve` with four simulated H100s (embedded default, local admin)."""
    with _serve(tmp_path_factory.mktemp("e2e-data")) as srv:
        yield srv


@pytest.fixture(scope="session")
def auth_server(dashboard_built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    """A live server that requires sign-in, and an API token of a member made with the CLI."""
    data_dir = tmp_path_factory.mktemp("e2e-auth-data")
    env = _server_env(data_dir, GPUFLEET_AUTH="on", GPUFLEET_SECRET_KEY=secrets.token_urlsafe(32))
    for args in (["db", "upgrade"], ["users", "add", "alice", "--role", "member"]):
        subprocess.run([*_gpufleet(), *args], env=env, check=True, capture_output=True, timeout=120)
    out = subprocess.run([*_gpufleet(), "tokens", "create", "alice"], env=env, check=True, capture_output=True,
                         text=True, timeout=120).stdout
    token = out.strip().splitlines()[-1].strip()
    with _serve(data_dir, GPUFLEET_AUTH="on", GPUFLEET_SECRET_KEY=env["GPUFLEET_SECRET_KEY"]) as srv:
        yield srv, token


@pytest.fixture
def doomed_server(dashboard_built: Path, tmp_path: Path) -> Iterator[Server]:
    """A server of its own for a test that stops it (to see the dashboard lose it)."""
    with _serve(tmp_path / "doomed-data") as srv:
        yield srv


@pytest.fixture
def restartable_server(dashboard_built: Path, tmp_path: Path) -> Iterator[Callable[[], object]]:
    """Start a server with ``start()``; each later ``start()`` uses the same port and data dir
    (after the test stopped the previous one), as an operator restarting gpufleet would."""
    port = _free_port()
    stack: list[object] = []

    def start() -> Server:
        cm = _serve(tmp_path / "restart-data", port=port)
        srv = cm.__enter__()
        stack.append(cm)
        return srv

    yield start
    for cm in reversed(stack):
        cm.__exit__(None, None, None)  # type: ignore[attr-defined]


# Module scope, not session: Playwright's sync API keeps an event loop running
# in the main thread while it is open, and later suites call asyncio.run().
@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    _need(CHROMIUM.exists(), f"{CHROMIUM} is missing: apt-get install -y chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _need(False, "playwright is not installed: pip install -e '.[test]'")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser, server: Server) -> Iterator[object]:  # noqa: ANN001
    # 1280 x 800: the narrow laptop screen the dashboard must stay readable on.
    ctx = browser.new_context(base_url=server.url, viewport={"width": 1280, "height": 800})
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.set_default_timeout(15_000)
    yield pg
    ctx.close()
    assert not errors, f"the dashboard threw in the browser: {errors}"


@pytest.fixture(scope="session")
def screenshots() -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS
