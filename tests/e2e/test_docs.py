"""``/docs`` and ``/redoc`` in a real browser with no network beyond the server, and signing in on ``/docs``.

Every request the page makes to any other origin is refused and recorded, so
a page that still reaches for a CDN fails here, as it would on an air-gapped
GPU box.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


# The status of the last response "Try it out" got for GET /api/v1/auth/whoami.
_STATUS_IS = """code => {
  const s = document.querySelector('#operations-auth-auth-whoami .live-responses-table tbody .response-col_status');
  return s !== null && s.innerText.trim().startsWith(code);
}"""


def _offline_context(browser, url: str, **options: object):
    ctx = browser.new_context(base_url=url, viewport={"width": 1280, "height": 900}, **options)
    outside: list[str] = []

    def only_the_server(route) -> None:
        if route.request.url.startswith(url):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    ctx.route("**/*", only_the_server)
    return ctx, outside


def test_docs_signs_in_with_a_token_and_runs_a_protected_call_offline(browser, auth_server, screenshots: Path) -> None:
    srv, token = auth_server
    ctx, outside = _offline_context(browser, srv.url)
    page = ctx.new_page()
    page.set_default_timeout(20_000)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto("/docs")
        page.locator(".swagger-ui .info .title").wait_for()
        assert "gpufleet" in page.locator(".swagger-ui .info .title").inner_text()

        op = page.locator("#operations-auth-auth-whoami")
        op.locator(".opblock-summary").click()
        # Without signing in, the protected call is refused.
        page.get_by_role("button", name="Try it out").click()
        op.locator("button.execute").click()
        page.wait_for_function(_STATUS_IS, arg="401")

        page.locator(".scheme-container button.authorize").click()
        dialog = page.locator(".dialog-ux .modal-ux")
        dialog.wait_for()
        bearer = dialog.locator(".auth-container").filter(has_text="bearerAuth")
        bearer.locator("#auth-bearer-value").fill(token)
        bearer.locator("button.authorize").click()
        bearer.get_by_text("Logout").wait_for()
        dialog.locator("button.btn-done").first.click()

        op.locator("button.execute").click()
        page.wait_for_function(_STATUS_IS, arg="200")
        body = op.locator(".live-responses-table tbody .response-col_description").first.inner_text()
        assert '"name": "alice"' in body and '"via": "token"' in body
        page.screenshot(path=str(screenshots / "docs-signed-in.png"), full_page=False)
    finally:
        ctx.close()
    assert not outside, f"/docs reached outside the server: {outside}"
    assert not errors, f"/docs threw in the browser: {errors}"


def test_redoc_renders_offline(browser, auth_server) -> None:
    srv, _token = auth_server
    # Under the page's own policy, as a user's browser loads it: that policy is what keeps ReDoc's
    # footer logo (an image on its CDN) from being fetched.
    ctx, outside = _offline_context(browser, srv.url, bypass_csp=False)
    page = ctx.new_page()
    page.set_default_timeout(20_000)
    try:
        page.goto("/redoc")
        # ReDoc drew the API's title and its operations from /openapi.json, with its own bundled script.
        page.locator("h1").filter(has_text="gpufleet").first.wait_for()
        page.get_by_text("Create Training").first.wait_for(state="attached")
        assert page.get_by_text("bearerAuth").count() > 0
    finally:
        ctx.close()
    assert not outside, f"/redoc reached outside the server: {outside}"
