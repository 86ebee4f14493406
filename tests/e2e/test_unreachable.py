"""What the dashboard shows when its server goes away: the last known state, said to be stale."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_server_gone_is_said_plainly(browser, doomed_server, screenshots: Path) -> None:
    ctx = browser.new_context(base_url=doomed_server.url, viewport={"width": 1280, "height": 800})
    page = ctx.new_page()
    page.set_default_timeout(20_000)
    try:
        page.goto("/")
        page.wait_for_function("document.querySelectorAll(\"[data-testid^='gpu-card-']\").length === 4")
        page.wait_for_selector(".live-open")

        doomed_server.stop()
        # The live badge drops, and the next refresh says the server cannot be reached
        # while the last known GPUs stay on screen.
        page.wait_for_selector(".live-closed, .live-connecting")
        page.get_by_text("cannot be reached").first.wait_for()
        assert page.locator("[data-testid^='gpu-card-']").count() == 4
        page.screenshot(path=str(screenshots / "server-unreachable.png"), full_page=True)

        # A page that has nothing to show yet says so instead of spinning.
        page.get_by_role("link", name="Trainings", exact=True).click()
        alert = page.get_by_role("alert")
        alert.wait_for()
        assert "Server unreachable" in alert.inner_text()
        assert page.get_by_role("button", name="Retry").is_visible()
    finally:
        ctx.close()


def test_the_fleet_page_resumes_after_a_server_restart_without_reload_or_gaps(
    browser, restartable_server, screenshots: Path
) -> None:
    first = restartable_server()
    ctx = browser.new_context(base_url=first.url, viewport={"width": 1280, "height": 800})
    page = ctx.new_page()
    page.set_default_timeout(30_000)
    points = "Number(document.querySelector(\"[data-testid='gpu-chart-0']\")?.dataset.points ?? 0)"
    try:
        page.goto("/")
        page.wait_for_function("document.querySelectorAll(\"[data-testid^='gpu-card-']\").length === 4")
        page.wait_for_selector(".live-open")
        page.wait_for_function(f"{points} >= 3")
        # A mark that a reload would wipe.
        page.evaluate("window.__sameDocument = true")

        first.stop()
        page.wait_for_selector(".live-closed, .live-connecting")
        before = page.evaluate(points)
        restartable_server()  # the same port and data dir, as an operator restarts it
        # The live stream comes back by itself (the client's backoff), on the same document.
        page.wait_for_selector(".live-open", timeout=60_000)
        assert page.evaluate("window.__sameDocument === true"), "the page was reloaded"
        # No gap: the points from before the restart are kept and new ones follow every second.
        stamps = []
        for _ in range(4):
            n = page.evaluate(points)
            page.wait_for_function(f"{points} > {n}", timeout=15_000)
            stamps.append(page.get_by_test_id("gpu-card-sim-host-0").get_by_test_id("gpu-updated").inner_text())
        assert page.evaluate(points) >= before + 4
        # The card's time (shown to the second) moves on with them. Two samples of a loaded
        # sampler can land in one displayed second, so each pair is not required to differ.
        assert stamps[-1] != stamps[0], stamps
        assert page.locator("[data-testid^='gpu-card-']").count() == 4
        page.screenshot(path=str(screenshots / "fleet-after-restart.png"), full_page=True)
    finally:
        ctx.close()
