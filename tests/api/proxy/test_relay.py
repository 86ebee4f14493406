"""A notebook on another GPU host: the server reaches it through that host's relay, which forwards only grants."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
from gpufleet.api.proxy.notebooks import Notebook
from gpufleet.api.proxy.origin import NotebookOrigin
from gpufleet.api.proxy.relay import NotebookRelay, start_relay
from gpufleet.api.proxy.upstream import RELAY_HEADER, upstream_for
from gpufleet.config import Settings
from support.people import People, bearer
from support.servers import free_port, serve_inprocess
from websockets.sync.client import connect

from gpufleet.api.proxy.place import loopback_host

from .conftest import ECHO, Jupyter
from .kernel import run_cell


@pytest.fixture(scope="module")
def relay(proxy_settings: Settings) -> Iterator[int]:
    """The far host's relay, as `gpufleet worker` serves it (here on loopback: one machine plays both hosts)."""
    with serve_inprocess(NotebookRelay(proxy_settings)) as served:
        yield served.port


@pytest.fixture(scope="module")
def far(jupyter: Jupyter, relay: int, proxy_settings: Settings, people: People) -> Iterator[tuple[str, Notebook]]:
    notebook = Notebook(jupyter.session_id, people.names["alice"], "running", "gpu-far", jupyter.port, jupyter.token,
                        address="127.0.0.1")
    settings = proxy_settings.model_copy(update={"session_relay_port": relay})
    app = NotebookOrigin(settings, lambda _s, session_id: notebook if session_id == notebook.session_id else None)
    with serve_inprocess(app) as served:
        app.settings = settings.model_copy(update={"sessions_origin": served.url})  # its port is known only now
        yield served.url, notebook


def test_http_and_a_kernel_round_trip_cross_hosts(far: tuple[str, Notebook], people: People) -> None:
    url, notebook = far
    base = f"{url}/sessions/{notebook.session_id}"
    listing = httpx.get(f"{base}/api/contents", headers=bearer(people.alice), timeout=60)
    assert listing.status_code == 200 and listing.json()["type"] == "directory"
    assert httpx.get(f"{base}/api/contents", headers=bearer(people.bob), timeout=60).status_code == 403
    kernel = httpx.post(f"{base}/api/kernels", json={}, headers=bearer(people.alice), timeout=120).json()["id"]
    try:
        with connect(f"ws{base[4:]}/api/kernels/{kernel}/channels", origin=url, open_timeout=60,
                     additional_headers=bearer(people.alice)) as ws:
            assert run_cell(ws, "print(6 * 7)").strip() == "42"
    finally:
        httpx.delete(f"{base}/api/kernels/{kernel}", headers=bearer(people.alice), timeout=60)


def test_the_relay_forwards_only_a_fresh_grant_for_that_session(relay: int, jupyter: Jupyter,
                                                                proxy_settings: Settings) -> None:
    notebook = Notebook(jupyter.session_id, "alice", "running", "gpu-far", jupyter.port, jupyter.token, "127.0.0.1")
    up = upstream_for(proxy_settings.model_copy(update={"session_relay_port": relay}), notebook)
    headers = dict(up.headers)
    path = f"/sessions/{jupyter.session_id}/api/contents"
    assert httpx.get(up.origin + path, headers=headers, timeout=60).status_code == 200
    # Without the grant the token alone is refused, so a token that leaked is no way in from the network.
    assert httpx.get(up.origin + path, headers={"authorization": headers["authorization"]},
                     timeout=60).status_code == 403
    # A grant for one session does not open another; one signed with another key opens nothing.
    other = "/sessions/someone-else/api/contents"
    assert httpx.get(up.origin + other, headers=headers, timeout=60).status_code == 403
    forged = upstream_for(proxy_settings.model_copy(update={"session_relay_port": relay, "secret_key": "x" * 40}),
                          notebook)
    assert httpx.get(up.origin + path, headers=dict(forged.headers), timeout=60).status_code == 403
    assert RELAY_HEADER in headers


def test_without_a_relay_the_far_notebook_is_a_clear_502(proxy_settings: Settings, jupyter: Jupyter,
                                                         people: People) -> None:
    notebook = Notebook(jupyter.session_id, people.names["alice"], "running", "gpu-far", jupyter.port, jupyter.token,
                        "127.0.0.1")
    app = NotebookOrigin(proxy_settings, lambda _s, _id: notebook)
    with serve_inprocess(app) as served:
        # The loopback default: the notebook's own host name, <id>.nb.localhost, on this port.
        own = {"Host": f"{loopback_host(notebook.session_id)}:{served.port}"}
        r = httpx.get(f"{served.url}/sessions/{notebook.session_id}/", headers={**bearer(people.alice), **own},
                      timeout=60)
        # Under the dashboard's loopback name, or another notebook's own name, it is not served.
        for host in (f"127.0.0.1:{served.port}", f"localhost:{served.port}", f"{loopback_host(ECHO)}:{served.port}"):
            wrong = httpx.get(f"{served.url}/sessions/{notebook.session_id}/", timeout=60,
                              headers={**bearer(people.alice), "Host": host})
            assert wrong.status_code == 400 and "host name" in wrong.json()["detail"], host
    assert r.status_code == 502 and "GPUFLEET_SESSION_RELAY_PORT" in r.json()["detail"]


def test_a_worker_serves_the_relay_only_with_a_port_and_a_strong_secret(proxy_settings: Settings) -> None:
    port = free_port()
    stop = threading.Event()
    assert start_relay(proxy_settings, stop) is None  # no port set: off
    weak = proxy_settings.model_copy(update={"session_relay_port": port, "secret_key": "change-me" * 4})
    assert start_relay(weak, stop) is None
    on = proxy_settings.model_copy(update={"session_relay_port": port, "advertise_address": "127.0.0.1"})
    thread = start_relay(on, stop)
    assert thread is not None
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/sessions/{uuid.uuid4()}/api", timeout=5)
                break
            except httpx.ConnectError:
                assert time.monotonic() < deadline, "the relay did not start listening"
                time.sleep(0.1)
        assert r.status_code == 403
    finally:
        stop.set()
        thread.join(30)
