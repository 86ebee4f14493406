"""A real notebook session through deploy/nginx/gpufleet.conf as shipped, under a real nginx.

The dashboard's server block in front of the API, the notebooks' server
block in front of the notebooks' origin (what `serve` runs on
GPUFLEET_SESSIONS_PORT), a real Jupyter server behind it. Through nginx: a
browser signs in (its cookie host-only, ``__Host-``), opens the notebook
with the dashboard's ticket, saves a notebook far past the API's 1 MiB,
starts a kernel with Jupyter's REST API and runs a cell on its channels
WebSocket; the notebooks' block keeps kernel connections open a day.
"""

from __future__ import annotations

import os
import re
import ssl
from collections.abc import Iterator

import httpx
import pytest
from gpufleet.api.app import create_app
from gpufleet.api.auth import NOTEBOOK_COOKIE_PURPOSE
from gpufleet.api.proxy.notebooks import Notebook
from gpufleet.api.proxy.origin import NotebookOrigin
from gpufleet.api.proxy.passes import page_key, read_pass
from gpufleet.config import Settings
from support.nginx import HAVE_TOOLS, SHIPPED, nginx, site_config
from support.people import People, browser_sign_in
from support.servers import free_port, serve_inprocess
from websockets.sync.client import connect

from .conftest import Jupyter
from .kernel import run_cell

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
pytestmark = [
    pytest.mark.slow,
    # .ci/run installs nginx-light: in CI a missing nginx is a failure, not a skip.
    pytest.mark.skipif(not HAVE_TOOLS and not IN_CI, reason="needs nginx and openssl"),
]
BEHIND_NGINX = {"proxy_headers": True, "forwarded_allow_ips": "127.0.0.1"}


@pytest.fixture(scope="module")
def behind_nginx(tmp_path_factory: pytest.TempPathFactory, proxy_settings: Settings,
                 notebooks: dict[str, Notebook]) -> Iterator[tuple[str, str]]:
    """(the dashboard's https origin, the notebooks' https origin), both through nginx."""
    https, notebooks_https = free_port(), free_port()
    dashboard, notebooks_origin = f"https://127.0.0.1:{https}", f"https://127.0.0.1:{notebooks_https}"
    settings = proxy_settings.model_copy(update={"sessions_origin": notebooks_origin,
                                                 "trusted_proxies": ["127.0.0.1"]})
    api = create_app(settings)
    api.state.notebook_locator = lambda _s, session_id: notebooks.get(session_id)
    origin = NotebookOrigin(settings, lambda _s, session_id: notebooks.get(session_id))
    with serve_inprocess(api, **BEHIND_NGINX) as api_served, serve_inprocess(origin, **BEHIND_NGINX) as nb_served:
        conf = site_config(tmp_path_factory.mktemp("nginx"), api_served.port, nb_served.port, free_port(), https,
                           notebooks_https)
        with nginx(conf, dashboard + "/healthz"):
            yield dashboard, notebooks_origin


def _tls() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    return ctx


def test_a_notebook_session_through_the_shipped_nginx(behind_nginx: tuple[str, str], jupyter: Jupyter,
                                                      people: People, proxy_settings: Settings) -> None:
    dashboard, origin = behind_nginx
    sid = jupyter.session_id
    with httpx.Client(verify=False, timeout=120) as browser:
        signed_in = browser_sign_in(browser, people.alice, base=dashboard, headers={"Origin": dashboard})
        assert signed_in.status_code == 200, signed_in.text
        assert re.match(r"__Host-gpufleet_session=[^;]+; .*Path=/; .*Secure", signed_in.headers["set-cookie"]) \
            and "Domain" not in signed_in.headers["set-cookie"]
        link = browser.post(f"{dashboard}/api/v1/sessions/{sid}/open", headers={"Origin": dashboard}).json()["url"]
        assert link.startswith(f"{origin}/sessions/{sid}/?gpufleet_ticket=")
        let_in = browser.get(link, follow_redirects=False)
        assert let_in.status_code == 200, let_in.text
        # One host name for all notebooks here: Secure, scoped to this notebook's path.
        name = f"__Secure-gpufleet_nb_{sid.replace('-', '')}"
        set_cookie = let_in.headers["set-cookie"]
        assert f"{name}=" in set_cookie and "Secure" in set_cookie and f"Path=/sessions/{sid}/" in set_cookie
        held = read_pass(proxy_settings, NOTEBOOK_COOKIE_PURPOSE, let_in.cookies[name], sid)
        assert held is not None
        key = page_key(proxy_settings, sid, held.nonce, len(jupyter.token))
        cookie = {"Cookie": f"{name}={let_in.cookies[name]}", "Authorization": f"token {key}"}
        here = {**cookie, "Origin": origin}

        page = browser.get(f"{origin}/sessions/{sid}/api/contents", headers=cookie)
        assert page.status_code == 200 and page.json()["type"] == "directory"
        # A notebook save of 5 MiB: far past the API's 1 MiB, still under the notebooks' block's limit.
        cells = [{"cell_type": "code", "source": "x" * 1024, "metadata": {}, "outputs": [], "execution_count": None}
                 for _ in range(5 * 1024)]
        notebook = {"type": "notebook", "format": "json",
                    "content": {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}}
        saved = browser.put(f"{origin}/sessions/{sid}/api/contents/big.ipynb", json=notebook, headers=here)
        assert saved.status_code == 201, saved.text[:300]
        assert browser.delete(f"{origin}/sessions/{sid}/api/contents/big.ipynb", headers=here).status_code == 204

        kernel = browser.post(f"{origin}/sessions/{sid}/api/kernels", json={"name": "python3"}, headers=here)
        assert kernel.status_code == 201, kernel.text
        kernel_id = kernel.json()["id"]
        try:
            channels = f"wss{origin[5:]}/sessions/{sid}/api/kernels/{kernel_id}/channels"
            with connect(f"{channels}?token={key}", ssl=_tls(), origin=origin,  # type: ignore[arg-type]
                         additional_headers={"Cookie": cookie["Cookie"]},
                         open_timeout=60) as ws:
                assert run_cell(ws, "print(6 * 7)").strip() == "42"
        finally:
            browser.delete(f"{origin}/sessions/{sid}/api/kernels/{kernel_id}", headers=here)


def test_the_shipped_notebooks_block_passes_upgrades_big_bodies_and_long_reads() -> None:
    """What the run above cannot wait for: a kernel's connection left quiet for hours."""
    site = SHIPPED.read_text()
    block = site[site.index("server_name notebooks.gpus.example.org;"):]
    assert "proxy_set_header Upgrade $http_upgrade;" in block
    assert "proxy_set_header Connection $connection_upgrade;" in block
    assert int(re.search(r"proxy_read_timeout (\d+)s;", block).group(1)) >= 8 * 3600  # type: ignore[union-attr]
    assert int(re.search(r"client_max_body_size (\d+)m;", block).group(1)) >= 100  # type: ignore[union-attr]
