"""An admin drains a GPU from its card and puts it back (the local admin of a loopback server)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_an_admin_drains_and_undrains_a_gpu_from_its_card(browser, doomed_server, screenshots: Path) -> None:
    ctx = browser.new_context(base_url=doomed_server.url, viewport={"width": 1280, "height": 800})
    page = ctx.new_page()
    page.set_default_timeout(20_000)
    try:
        page.goto("/")
        card = page.get_by_test_id("gpu-card-sim-host-3")
        card.get_by_role("button", name="Drain").click()
        card.get_by_role("button", name="Undrain").wait_for()
        card.get_by_text("drained", exact=True).wait_for()
        gpus = httpx.get(f"{doomed_server.url}/api/v1/system/gpus", timeout=10).json()["data"]
        assert [g["index"] for g in gpus if g["drained"]] == [3]
        page.screenshot(path=str(screenshots / "fleet-drained.png"), full_page=True)
        card.get_by_role("button", name="Undrain").click()
        card.get_by_role("button", name="Drain").wait_for()
        gpus = httpx.get(f"{doomed_server.url}/api/v1/system/gpus", timeout=10).json()["data"]
        assert not [g["index"] for g in gpus if g["drained"]]
    finally:
        ctx.close()
