"""The admin area (Team), one GPU's page and the sweep form, in a real browser against a real server."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest

from gpufleet.config import load_settings
from gpufleet.db.session import session_scope
from gpufleet.users import directory
from gpufleet.users.groups import list_groups, user_quotas
from gpufleet.users.tokens import list_tokens

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_an_admin_runs_the_team_from_the_team_page(page, server, screenshots: Path) -> None:  # noqa: ANN001
    settings = load_settings(data_dir=server.data_dir)
    tag = uuid.uuid4().hex[:4]
    dana, group = f"dana-{tag}", f"nlp-{tag}"
    page.goto("/")
    page.get_by_role("link", name="Team").click()
    page.get_by_label("new user name").fill(dana)
    page.get_by_role("button", name="Add user").click()
    row = page.get_by_test_id(f"user-{dana}")
    row.wait_for()
    row.get_by_label(f"role of {dana}").select_option("viewer")
    page.wait_for_function(f"document.querySelector('[data-testid=\"user-{dana}\"] select').value === 'viewer'")
    row.get_by_label(f"priority cap of {dana}").fill("25")
    row.get_by_role("button", name="Save").click()
    page.get_by_label("token user").fill(dana)
    page.get_by_label("token label").fill("laptop")
    page.get_by_role("button", name="Create token").click()
    secret = page.get_by_test_id("token-secret").locator("code").inner_text()
    page.get_by_label("new group name").fill(group)
    page.get_by_role("button", name="Create group").click()
    page.get_by_label(f"add a member to {group}").fill(dana)
    page.get_by_role("button", name="Add member").click()
    page.get_by_test_id(f"group-{group}").get_by_text(dana).wait_for()
    page.screenshot(path=str(screenshots / "team-admin.png"), full_page=True)

    with session_scope(settings) as sess:
        views = {v.name: v for v in directory.user_views(sess)}
        assert views[dana].role == "viewer" and views[dana].groups == [group]
        assert user_quotas(sess)[dana].max_priority == 25
        tokens = [t for t, owner in list_tokens(sess, dana)]
        assert [t.name for t in tokens] == ["laptop"] and secret.startswith(tokens[0].prefix)
        assert next(g for g in list_groups(sess) if g.name == group).members == [dana]


def test_a_gpu_has_a_page_with_what_runs_on_it_and_its_scheduling(page, server, screenshots: Path) -> None:  # noqa: ANN001
    page.goto("/")
    page.get_by_test_id("gpu-card-sim-host-2").get_by_role("link", name="GPU 2").click()
    page.get_by_test_id("gpu-page").wait_for()
    assert page.url.endswith("/gpus/sim-host/2")
    assert page.get_by_test_id("gpu-scheduling").inner_text() == "in"
    assert page.get_by_test_id("gpu-health").inner_text() == "no mark"
    try:
        page.get_by_role("button", name="Drain").click()
        page.get_by_role("button", name="Undrain").wait_for()
        assert page.get_by_test_id("gpu-scheduling").inner_text().startswith("drained")
        gpus = httpx.get(f"{server.url}/api/v1/system/gpus", timeout=10).json()["data"]
        assert [g["index"] for g in gpus if g["drained"]] == [2]
        page.get_by_test_id("history-charts").wait_for()
        page.screenshot(path=str(screenshots / "gpu-page.png"), full_page=True)
    finally:
        httpx.post(f"{server.url}/api/v1/system/gpus/sim-host/2/undrain", timeout=10)


def test_a_sweep_started_from_the_form_runs_as_its_file_says(page, server, screenshots: Path) -> None:  # noqa: ANN001
    name = f"form-sweep-{uuid.uuid4().hex[:4]}"
    page.goto("/sweeps")
    page.get_by_role("link", name="New sweep").first.click()
    page.get_by_label("Name").fill(name)
    page.get_by_label("Recipe").select_option("mlp")
    page.get_by_label("Base config").fill("max_steps: 4\nglobal_batch_size: 8")
    page.get_by_label("parameter field").fill("lr")
    page.get_by_label("parameter kind").select_option("list")
    page.get_by_label("parameter values").fill("0.001, 0.01")
    yaml = page.get_by_test_id("sweep-yaml").inner_text()
    assert f"name: {name}" in yaml and "lr: [0.001, 0.01]" in yaml
    page.screenshot(path=str(screenshots / "sweep-form.png"), full_page=True)
    page.get_by_role("button", name="Start sweep").click()
    page.wait_for_url("**/sweeps/*-*")
    sweep_id = page.url.rsplit("/", 1)[1]
    detail = httpx.get(f"{server.url}/api/v1/sweeps/{sweep_id}", timeout=10).json()
    assert detail["name"] == name and detail["total_trials"] == 2
    assert detail["spec"]["space"] == {"lr": [0.001, 0.01]}
    assert detail["spec"]["config"] == {"max_steps": 4, "global_batch_size": 8}
    # The driver turns the grid's points into trials as it runs; they show on the page.
    page.get_by_text("0.001").first.wait_for(timeout=60_000)
    page.get_by_text(name).first.wait_for()
    page.screenshot(path=str(screenshots / "sweep-started-from-form.png"), full_page=True)
    httpx.post(f"{server.url}/api/v1/sweeps/{sweep_id}/cancel", timeout=10)
