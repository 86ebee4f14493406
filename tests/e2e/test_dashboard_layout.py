"""Dashboard details in a real browser: the GPU card title, a refused config, the log panel's wrapping.

Screenshots go to test-artifacts/screenshots/ for a person to look at.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_gpu_card_title_keeps_model_and_vendor_apart_at_1440(page, screenshots: Path) -> None:
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto("/")
    card = page.locator("[data-testid^='gpu-card-']").first
    card.wait_for()
    title, vendor = card.get_by_test_id("gpu-title"), card.get_by_test_id("gpu-vendor")
    assert "NVIDIA H100" in title.inner_text()
    assert vendor.inner_text() == "NVIDIA · cuda"
    # Each on a line of its own, and the vendor shown whole (not cut by an ellipsis).
    t_box, v_box = title.bounding_box(), vendor.bounding_box()
    assert v_box["y"] >= t_box["y"] + t_box["height"] - 1
    assert vendor.evaluate("e => e.scrollWidth <= e.clientWidth")
    card.screenshot(path=str(screenshots / "gpu-card-title-1440.png"))


def test_a_config_that_can_never_be_placed_is_refused_and_start_is_disabled(page, screenshots: Path) -> None:
    page.goto("/trainings/new")
    page.get_by_label("Steps", exact=True).wait_for()
    # The simulated fleet has four GPUs: 64 can never be placed.
    page.get_by_label("GPUs wanted").fill("64")
    refused = page.get_by_test_id("refused")
    refused.wait_for(timeout=60_000)
    assert "never" in refused.inner_text()
    need = page.get_by_test_id("estimate-need").inner_text()
    assert "refuses" in need and "estimating" not in need
    assert page.get_by_role("button", name="Start training").is_disabled()
    page.screenshot(path=str(screenshots / "training-new-refused.png"), full_page=True)
    # Back to a possible request: the refusal goes and Start comes back.
    page.get_by_label("GPUs wanted").fill("1")
    page.wait_for_function("() => !document.querySelector(\"[data-testid='refused']\")", timeout=60_000)
    page.wait_for_function(
        "() => !document.querySelector(\"[data-testid='estimate-need']\").innerText.includes('estimating')",
        timeout=60_000,
    )
    assert page.get_by_role("button", name="Start training").is_enabled()


def test_log_panel_wraps_at_spaces_and_breaks_only_overlong_tokens(page, screenshots: Path) -> None:
    page.goto("/")
    page.locator("[data-testid^='gpu-card-']").first.wait_for()
    # A log panel styled by the built stylesheet, with prose and one token longer than the line.
    widths = page.evaluate(
        """() => {
          const pre = document.createElement('pre');
          pre.className = 'log';
          pre.style.width = '420px';
          pre.style.height = 'auto';
          pre.textContent = 'step 120 loss 0.4312 checkpoint written to ' + 'x'.repeat(40) + '/' + 'y'.repeat(120)
            + '\\nwarning: gradient_accumulation_steps reduced to fit the memory of the chosen GPU';
          document.querySelector('main').prepend(pre);
          const cs = getComputedStyle(pre);
          return {wordBreak: cs.wordBreak, overflowWrap: cs.overflowWrap, whiteSpace: cs.whiteSpace,
                  scroll: pre.scrollWidth, client: pre.clientWidth};
        }"""
    )
    assert widths["whiteSpace"] == "pre-wrap"
    assert widths["wordBreak"] == "normal"
    assert widths["overflowWrap"] == "anywhere"
    assert widths["scroll"] <= widths["client"]  # the overlong path is broken, not overflowing
    page.locator("pre.log").screenshot(path=str(screenshots / "log-panel-wrapping.png"))
