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
import subprocess
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from support.servers import ServedProcess, free_port, make_token, serve_process

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


# Four simulated H100s, all joined by NVLink.
FLEET = {"GPUFLEET_SIMULATE": "4xH100-80GB", "GPUFLEET_SIMULATE_TOPOLOGY": "nvlink-all"}


@pytest.fixture(scope="session")
def server(dashboard_built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedProcess]:
    """A live `gpufleet serve` with four simulated H100s (embedded default, local admin)."""
    with serve_process(tmp_path_factory.mktemp("e2e-data"), **FLEET) as srv:
        yield srv


@pytest.fixture(scope="session")
def auth_server(dashboard_built: Path,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServedProcess, str]]:
    """A live server that requires sign-in, and an API token of a member made with the CLI."""
    data_dir = tmp_path_factory.mktemp("e2e-auth-data")
    env = {**FLEET, "GPUFLEET_AUTH": "on", "GPUFLEET_SECRET_KEY": secrets.token_urlsafe(32)}
    token = make_token(data_dir, "alice", "member", **env)
    with serve_process(data_dir, **env) as srv:
        yield srv, token


@pytest.fixture
def doomed_server(dashboard_built: Path, tmp_path: Path) -> Iterator[ServedProcess]:
    """A server of its own for a test that stops it (to see the dashboard lose it)."""
    with serve_process(tmp_path / "doomed-data", **FLEET) as srv:
        yield srv


@pytest.fixture
def restartable_server(dashboard_built: Path, tmp_path: Path) -> Iterator[Callable[[], object]]:
    """Start a server with ``start()``; each later ``start()`` uses the same port and data dir
    (after the test stopped the previous one), as an operator restarting gpufleet would."""
    port = free_port()
    with ExitStack() as stack:
        yield lambda: stack.enter_context(serve_process(tmp_path / "restart-data", port=port, **FLEET))


class ProbingBrowser:
    """The browser, whose contexts let the tests' own probes run.

    Playwright's ``wait_for_function`` evaluates its string as script, which
    the dashboard's Content-Security-Policy forbids (no eval): so a context
    bypasses the page's policy unless a test asks for it (``bypass_csp=False``,
    as test_notebook_takeover.py does, with the dashboard and a notebook
    under their real policies).
    """

    def __init__(self, browser: object):
        self._browser = browser

    def new_context(self, **options: object) -> object:
        options.setdefault("bypass_csp", True)
        return self._browser.new_context(**options)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self._browser, name)


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
            yield ProbingBrowser(b)
        finally:
            b.close()


@pytest.fixture
def page(browser, server: ServedProcess) -> Iterator[object]:
    # 1280 x 800: the narrow laptop screen the dashboard must stay readable on.
    ctx = browser.new_context(base_url=server.url, viewport={"width": 1280, "height": 800})
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.set_default_timeout(15_000)
    yield pg
    ctx.close()
    assert not errors, f"the dashboard threw in the browser: {errors}"


def sign_in(page: object, token: str) -> None:
    """Sign in with ``token`` from the dialog and wait until the page has reloaded signed in.

    Clicking on before the dialog has gone races the sign-in's reload: a click that lands on the
    old document while it reloads is lost with it.
    """
    dialog = page.get_by_role("dialog", name="Sign in")  # type: ignore[attr-defined]
    dialog.wait_for()
    page.get_by_label("Token").fill(token)  # type: ignore[attr-defined]
    page.get_by_role("button", name="Sign in").click()  # type: ignore[attr-defined]
    dialog.wait_for(state="detached", timeout=60_000)


def wait_shown(page: object, testid: str, srv: ServedProcess, timeout_ms: int = 60_000) -> None:
    """Wait for an element of the page; if it never shows, fail with what the page and the server said."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.get_by_test_id(testid).wait_for(timeout=timeout_ms)  # type: ignore[attr-defined]
    except PlaywrightTimeout:
        shown = page.locator("main").inner_text(timeout=5_000)  # type: ignore[attr-defined]
        pytest.fail(f"{testid} not shown in {timeout_ms / 1000:.0f} s at {page.url}; "  # type: ignore[attr-defined]
                    f"the page showed:\n{shown}\n--- the server's log ends:\n{srv.log_tail()}")


@pytest.fixture(scope="session")
def screenshots() -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS
