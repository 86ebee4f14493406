"""The notebooks' origin for WebSockets: a kernel's channels end to end, and the same refusals as HTTP."""

from __future__ import annotations

import json

import httpx
import pytest
from support.people import People, bearer, browser_sign_in
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from gpufleet.config import Settings

from .conftest import ECHO, Jupyter, Opened, let_in
from .kernel import run_cell


def _opened(gpufleet: str, token: str, session_id: str, settings: Settings, notebook_token: str) -> Opened:
    """The notebook's pass of a browser signed in with ``token`` that opened ``session_id``."""
    with httpx.Client(timeout=60) as client:
        assert browser_sign_in(client, token, base=gpufleet).status_code == 200
        return let_in(client, gpufleet, session_id, settings, notebook_token)


def _ws(gpufleet: str) -> str:
    return "ws" + gpufleet[len("http"):]


def test_a_cell_runs_on_the_kernel_through_the_notebooks_origin(gpufleet: str, origin: str, jupyter: Jupyter,
                                                                 people: People, proxy_settings: Settings) -> None:
    base = f"/sessions/{jupyter.session_id}"
    kernel = httpx.post(f"{origin}{base}/api/kernels", json={"name": "python3"}, headers=bearer(people.alice),
                        timeout=120)
    assert kernel.status_code == 201, kernel.text
    channels = f"{_ws(origin)}{base}/api/kernels/{kernel.json()['id']}/channels"
    opened = _opened(gpufleet, people.alice, jupyter.session_id, proxy_settings, jupyter.token)
    dashboard = httpx.post(f"{gpufleet}/api/v1/auth/sign-in", json={"token": people.alice}, timeout=60).cookies
    try:
        # As JupyterLab connects: the cookie, and the page's key on the URL (appendToken).
        with connect(f"{channels}?token={opened.key}", additional_headers={"Cookie": opened.cookie}, origin=origin,
                     open_timeout=60) as ws:
            printed = run_cell(ws, "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])")
        assert printed.strip() == "3"
        keyed = f"{channels}?token={opened.key}"
        for who, url, headers, from_ in (
                ("nobody", channels, {}, origin),
                ("alice's dashboard cookie", keyed, {"Cookie": f"gpufleet_session={dashboard['gpufleet_session']}"},
                 origin),
                ("alice's notebook cookie alone", channels, {"Cookie": opened.cookie}, origin),
                ("the key alone", keyed, {}, origin),
                ("alice from another site", keyed, {"Cookie": opened.cookie}, "http://evil.example"),
                ("alice from the dashboard's origin", keyed, {"Cookie": opened.cookie}, gpufleet)):
            with pytest.raises(InvalidStatus) as refused:
                connect(url, additional_headers=headers, origin=from_, open_timeout=60)  # type: ignore[arg-type]
            assert refused.value.response.status_code == 403, who
        with httpx.Client(timeout=60) as bob:
            assert browser_sign_in(bob, people.bob, base=gpufleet).status_code == 200
            assert bob.post(f"{gpufleet}/api/v1/sessions/{jupyter.session_id}/open",
                            headers={"Origin": gpufleet}).status_code == 403
    finally:
        httpx.delete(f"{origin}{base}/api/kernels/{kernel.json()['id']}", headers=bearer(people.alice), timeout=60)


def test_frames_subprotocols_and_headers_pass_as_the_browser_sent_them(gpufleet: str, origin: str,
                                                                       people: People,
                                                                       proxy_settings: Settings) -> None:
    opened = _opened(gpufleet, people.alice, ECHO, proxy_settings, "echo-token")
    with connect(f"{_ws(origin)}/sessions/{ECHO}/ws?token={opened.key}", origin=origin, open_timeout=60,
                 additional_headers={"Cookie": opened.cookie + "; _xsrf=mine"},
                 subprotocols=["first.example", "v1.kernel.websocket.jupyter.org"]) as ws:  # type: ignore[list-item]
        assert ws.subprotocol == "v1.kernel.websocket.jupyter.org"
        hello = json.loads(ws.recv(timeout=60))
        assert hello["headers"]["authorization"] == "token echo-token"  # frames are not scrubbed: not shown as pages
        assert hello["headers"]["cookie"] == "_xsrf=mine"
        assert hello["headers"]["origin"].startswith("http://127.0.0.1:")
        ws.send("text frame")
        assert ws.recv(timeout=60) == "echo:text frame"
        big = bytes(range(256)) * 2048  # 512 KiB, past the API's message limit
        ws.send(big)
        assert ws.recv(timeout=60) == b"echo:" + big
        # The notebook closing with a code closes the browser's socket with it.
        ws.send("close:4001")
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=60)
        assert ws.close_code == 4001
