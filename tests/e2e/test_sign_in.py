"""Signing in to a server that requires it, in a real browser.

The server runs with GPUFLEET_AUTH=on; a member and their API token are made
with the CLI (`gpufleet users add`, `gpufleet tokens create`), as an admin would.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_sign_in_with_a_token_then_the_fleet_shows(browser, auth_server, screenshots: Path) -> None:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    srv, token = auth_server
    ctx = browser.new_context(base_url=srv.url, viewport={"width": 1280, "height": 800})
    page = ctx.new_page()
    page.set_default_timeout(15_000)
    try:
        page.goto("/")
        dialog = page.get_by_role("dialog", name="Sign in")
        dialog.wait_for()
        assert page.locator("[data-testid^='gpu-card-']").count() == 0
        page.screenshot(path=str(screenshots / "sign-in.png"), full_page=True)

        page.get_by_label("Token").fill("gf_not_a_real_token")
        page.get_by_role("button", name="Sign in").click()
        page.get_by_role("alert").wait_for()
        assert dialog.is_visible()

        page.get_by_label("Token").fill(token)
        page.get_by_role("button", name="Sign in").click()
        try:
            page.wait_for_function("document.querySelectorAll(\"[data-testid^='gpu-card-']\").length === 4",
                                   timeout=40_000)
        except PlaywrightTimeout:
            shown = page.locator("body").inner_text()[:1500]
            raise AssertionError(f"no fleet after signing in; the page says:\n{shown}\n"
                                 f"--- serve log ---\n{srv.log_tail()}") from None
        # The token itself is never kept by the page; the session is an HTTP-only cookie.
        cookies = ctx.cookies()
        assert cookies and all(c["httpOnly"] for c in cookies)
        assert token not in page.evaluate(
            "JSON.stringify(localStorage) + JSON.stringify(sessionStorage) + document.cookie")
        # The session's page key is in the page's own storage; the live stream opens with a ticket asked with it.
        assert page.evaluate("localStorage.getItem('gpufleet-page-key')")
        page.wait_for_selector(".live-open", timeout=15_000)
    finally:
        ctx.close()
