"""What the dashboard shows when its server goes away: the last known state, said to be stale."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_server_gone_is_said_plainly(browser, doomed_server, screenshots: Path) -> None:  # noqa: ANN001
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
