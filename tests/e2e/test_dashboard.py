"""The dashboard in a real browser against a real `gpufleet serve` on a simulated fleet.

Screenshots of the fleet page and of training pages are written to
test-artifacts/screenshots/ for a person to look at.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

GPU_COUNT = 4
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def _cards(page):
    return page.locator("[data-testid^='gpu-card-']")


def _wait_status(page, status: str, timeout_s: float, server=None) -> None:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(
            "(s) => (document.querySelector(\"[data-testid='training-status']\")?.innerText ?? '').includes(s)",
            arg=status,
            timeout=timeout_s * 1000,
        )
    except PlaywrightTimeout:
        # Say where it got stuck: the status and the events the page shows.
        shown = page.locator("main").inner_text()[:1500]
        log = ""
        if server is not None:
            # The API's own view tells a stale page from a stuck training.
            import httpx

            try:
                rows = httpx.get(f"{server.url}/api/v1/trainings", timeout=5).json()["data"]
                api = "; ".join(f"{r['name']}: {r['status']} ({r['status_reason']})" for r in rows)
            except Exception as exc:  # noqa: BLE001 - diagnostics only
                api = f"unavailable: {exc}"
            log = f"\n--- the API says ---\n{api}\n--- gpufleet serve log (tail) ---\n{server.log_tail()}"
        raise AssertionError(f"training never showed {status!r} within {timeout_s} s; "
                             f"the page says:\n{shown}{log}") from None


def _wait_visible(page, test_id: str, timeout_s: float) -> None:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.get_by_test_id(test_id).wait_for(timeout=timeout_s * 1000)
    except PlaywrightTimeout:
        shown = page.locator("main").inner_text()[:1500]
        raise AssertionError(f"{test_id} never appeared within {timeout_s} s; the page says:\n{shown}") from None


def test_fleet_page_shows_every_gpu_and_updates(page, screenshots: Path) -> None:
    page.goto("/")
    page.wait_for_function(f"document.querySelectorAll(\"[data-testid^='gpu-card-']\").length === {GPU_COUNT}")
    assert page.get_by_test_id("gpu-total").inner_text() == f"{GPU_COUNT} GPUs on 1 host"
    assert "Simulated fleet" in page.get_by_test_id("simulated-banner").inner_text()
    for i in range(GPU_COUNT):
        assert "H100" in page.get_by_test_id(f"gpu-card-sim-host-{i}").inner_text()
    # Live: the WebSocket connects and each card's sample time moves on.
    page.wait_for_selector(".live-open", timeout=15_000)
    first = page.get_by_test_id("gpu-card-sim-host-0").get_by_test_id("gpu-updated").inner_text()
    page.wait_for_function(
        "(first) => document.querySelector(\"[data-testid='gpu-card-sim-host-0'] [data-testid='gpu-updated']\")"
        "?.innerText !== first",
        arg=first,
        timeout=15_000,
    )
    # The mini chart fills from the stream.
    page.wait_for_function(
        "Number(document.querySelector(\"[data-testid='gpu-chart-0']\")?.dataset.points) >= 2", timeout=15_000
    )
    page.screenshot(path=str(screenshots / "fleet-per-gpu.png"), full_page=True)


def test_toggle_switches_views(page, screenshots: Path) -> None:
    page.goto("/")
    _cards(page).first.wait_for()
    page.get_by_role("button", name="Aggregated").click()
    page.get_by_test_id("aggregate-view").wait_for()
    assert _cards(page).count() == 0
    assert page.get_by_test_id("agg-gpu-count").inner_text() == str(GPU_COUNT)
    assert page.get_by_test_id("host-row-sim-host").is_visible()
    page.wait_for_function(
        "Number(document.querySelector(\"[data-testid='aggregate-chart']\")?.dataset.points) >= 2", timeout=15_000
    )
    page.screenshot(path=str(screenshots / "fleet-aggregated.png"), full_page=True)
    # Keyboard reachable: focus the control and press Enter.
    page.get_by_role("button", name="Topology").focus()
    page.keyboard.press("Enter")
    page.get_by_test_id("topology-view").wait_for()
    # nvlink-all: every pair of the four GPUs is an NVLink cell.
    assert page.locator("td.topo-nv").count() == GPU_COUNT * (GPU_COUNT - 1)
    page.screenshot(path=str(screenshots / "fleet-topology.png"), full_page=True)
    page.get_by_role("button", name="Per GPU").click()
    _cards(page).first.wait_for()
    assert _cards(page).count() == GPU_COUNT


def test_foreign_process_shows_on_its_gpu(page, server, screenshots: Path) -> None:
    from gpufleet.config import load_settings
    from gpufleet.devices.simstate import add_foreign_process, remove_foreign_process

    # Someone else's job on GPU 3, as the simulated NVML reports it to the agent.
    sim = load_settings(data_dir=server.data_dir, simulate="4xH100-80GB")
    pid = add_foreign_process(sim, 3, 30 * 1024**3, user="bob", name="python")
    try:
        page.goto("/")
        card = page.get_by_test_id("gpu-card-sim-host-3")
        card.wait_for()
        page.wait_for_function(
            "(c) => { const t = document.querySelector(c)?.innerText ?? '';"
            " return t.includes('bob') && t.includes('foreign'); }",
            arg="[data-testid='gpu-card-sim-host-3']",
            timeout=20_000,
        )
        text = card.inner_text()
        assert f"pid {pid}" in text
        page.screenshot(path=str(screenshots / "fleet-foreign-process.png"), full_page=True)
    finally:
        remove_foreign_process(sim, pid)


def test_history_page_draws_stored_samples(page, screenshots: Path) -> None:
    # The agent has been storing one sample per GPU per second since the server started.
    page.goto("/history?gpu=sim-host:1&range=1h")
    _wait_visible(page, "history-charts", 40)
    page.wait_for_function(
        "Number(document.querySelector(\"[data-testid='history-utilization']\")?.dataset.points) >= 1"
    )
    assert page.get_by_label("GPU").input_value() == "sim-host:1"
    page.get_by_role("button", name="Last day").click()
    page.get_by_test_id("history-charts").wait_for()
    page.screenshot(path=str(screenshots / "history.png"), full_page=True)


def _start_training(page, name: str, steps: int, gpus: int = 1, screenshot: Path | None = None) -> str:
    page.goto("/trainings/new")
    # The form suggests a name once the server's recipes arrive; typing before that can
    # race it (the suggestion lands between fill's select-all and its typing).
    page.get_by_label("Steps", exact=True).wait_for(timeout=15_000)
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_label("GPUs wanted").fill(str(gpus))
    page.get_by_label("Steps", exact=True).fill(str(steps))
    page.get_by_label("Log every (steps)").fill("2")
    page.get_by_label("Checkpoint every (steps)").fill("20")
    # The recommended GPU is preselected once the server answered: the first estimate of a shape starts an
    # estimate process (torch imported) and traces, which on a loaded 2-core machine took more than 15 s.
    page.wait_for_function(
        "(n) => document.querySelectorAll(\"[data-testid^='sel-'] input:checked\").length === n",
        arg=gpus, timeout=60_000,
    )
    if screenshot is not None:
        page.screenshot(path=str(screenshot), full_page=True)
    page.get_by_role("button", name="Start training").click()
    page.wait_for_url(re.compile(rf"/trainings/{UUID}$"), timeout=15_000)
    return page.url.rsplit("/", 1)[1]


def test_training_from_the_form_succeeds_with_a_loss_curve(page, server, screenshots: Path) -> None:
    # Two GPUs: a DDP run with two ranks (gloo on the CPU of this simulated fleet).
    tid = _start_training(page, "e2e-sae", steps=40, gpus=2, screenshot=screenshots / "training-new.png")
    assert page.get_by_test_id("training-name").inner_text() == "e2e-sae"
    _wait_status(page, "succeeded", 180, server)
    page.wait_for_function(
        "Number(document.querySelector(\"[data-testid='loss-chart']\")?.dataset.points) >= 5", timeout=15_000
    )
    assert "succeeded" in page.get_by_test_id("events").inner_text()
    # Both ranks report their step times.
    assert page.get_by_test_id("rank-times").locator(".rank").count() == 2
    # The GPUs' utilization during the run, from the stored history. A fast machine
    # finishes the run within a couple of sampling intervals: one stored point is what
    # any run of it is sure to have.
    page.wait_for_function(
        "Number(document.querySelector(\"[data-testid='run-gpu-chart']\")?.dataset.points) >= 1", timeout=20_000
    )
    page.screenshot(path=str(screenshots / "training-succeeded.png"), full_page=True)
    # It is listed with its status.
    page.goto("/trainings")
    row = page.get_by_test_id(f"training-row-{tid}")
    row.wait_for()
    assert "succeeded" in row.inner_text()
    page.screenshot(path=str(screenshots / "trainings-list.png"), full_page=True)


def test_second_training_is_cancelled_from_the_ui(page, server, screenshots: Path) -> None:
    tid = _start_training(page, "e2e-cancel-me", steps=100_000)
    _wait_status(page, "running", 120, server)
    # The fleet page says who holds the GPU: this training, linked.
    page.goto("/")
    holder = _cards(page).filter(has_text="e2e-cancel-me")
    holder.wait_for(timeout=20_000)
    assert holder.get_by_role("link", name="e2e-cancel-me").get_attribute("href") == f"/trainings/{tid}"
    page.screenshot(path=str(screenshots / "fleet-with-training.png"), full_page=True)
    holder.get_by_role("link", name="e2e-cancel-me").click()
    _wait_status(page, "running", 30)
    page.get_by_role("button", name="Cancel training").click()
    page.get_by_role("button", name="Yes, cancel it").click()
    _wait_status(page, "cancelled", 60, server)
    assert page.get_by_role("button", name="Cancel training").count() == 0
    page.screenshot(path=str(screenshots / "training-cancelled.png"), full_page=True)
    # Its GPU is given back: the fleet page stops naming it as the holder.
    page.goto("/")
    _cards(page).first.wait_for()
    page.wait_for_function(
        "!Array.from(document.querySelectorAll(\"[data-testid^='gpu-card-']\"))"
        ".some((c) => c.innerText.includes('e2e-cancel-me'))",
        timeout=20_000,
    )
