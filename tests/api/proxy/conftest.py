"""A real Jupyter server, gpufleet's API and its notebooks' origin in front of it, and an echo server.

The notebook server is `jupyter server` (jupyter_server, as a session's
worker starts it) on a loopback port with a token and the base URL
``/sessions/<id>/``; the tests reach it only through the notebooks' origin
(`NotebookOrigin`, what `serve` runs on GPUFLEET_SESSIONS_PORT), whose
address the API hands out (GPUFLEET_SESSIONS_ORIGIN).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from dataclasses import dataclass

from gpufleet.api.app import create_app
from gpufleet.api.auth import NOTEBOOK_COOKIE_PURPOSE
from gpufleet.api.proxy.notebooks import Notebook
from gpufleet.api.proxy.origin import NotebookOrigin
from gpufleet.api.proxy.passes import page_key, read_pass
from gpufleet.config import Settings, load_settings
from gpufleet.db.session import upgrade_database
from support.people import SECRET, People, make_people
from support.servers import free_port, serve_inprocess

from .echo import echo_app


# The echo server's and a queued session's ids.
ECHO = "ec40ec40-0000-4000-8000-000000000001"
QUEUED = "90e0ed00-0000-4000-8000-000000000002"


class Jupyter:
    def __init__(self, session_id: str, port: int, token: str, proc: subprocess.Popen[bytes], log: Path):
        self.session_id, self.port, self.token, self.proc, self.log = session_id, port, token, proc, log


@pytest.fixture(scope="module")
def jupyter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jupyter]:
    root = tmp_path_factory.mktemp("notebook-root")
    session_id, port, token = str(uuid.uuid4()), free_port(), secrets.token_hex(24)
    log = root.parent / "jupyter.log"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="3")
    cmd = [sys.executable, "-m", "jupyter_server", "--allow-root", "--no-browser", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--ServerApp.base_url=/sessions/{session_id}/",
           f"--ServerApp.root_dir={root}", f"--IdentityProvider.token={token}"]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=root)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/sessions/{session_id}/api", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.2)
        yield Jupyter(session_id, port, token, proc, log)
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.fixture(scope="module")
def proxy_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    settings = load_settings(data_dir=tmp_path_factory.mktemp("gpufleet-data"), auth="on", secret_key=SECRET,
                             host_name="api-host", unix_socket="off")
    upgrade_database(settings)
    return settings


@pytest.fixture(scope="module")
def people(proxy_settings: Settings) -> People:
    return make_people(proxy_settings, suffix="-" + uuid.uuid4().hex[:6])


@pytest.fixture(scope="module")
def echo() -> Iterator[str]:
    with serve_inprocess(echo_app) as served:
        yield str(served.port)


@pytest.fixture(scope="module")
def notebooks(jupyter: Jupyter, people: People, echo: str) -> dict[str, Notebook]:
    """What the locator answers: the Jupyter server (alice's), an echo server (alice's), a queued session."""
    alice = people.names["alice"]
    return {
        jupyter.session_id: Notebook(jupyter.session_id, alice, "running", "api-host", jupyter.port, jupyter.token),
        ECHO: Notebook(ECHO, alice, "running", "api-host", int(echo), "echo-token"),
        QUEUED: Notebook(QUEUED, alice, "queued"),
    }


@pytest.fixture(scope="module")
def origin(proxy_settings: Settings, notebooks: dict[str, Notebook]) -> Iterator[str]:
    """The notebooks' origin, as `serve` runs it on its second port."""
    app = NotebookOrigin(proxy_settings, lambda _s, session_id: notebooks.get(session_id))
    with serve_inprocess(app) as served:
        # One host name for all notebooks (GPUFLEET_SESSIONS_ORIGIN without {id}): its port is known only now.
        app.settings = proxy_settings.model_copy(update={"sessions_origin": served.url})
        yield served.url


@pytest.fixture(scope="module")
def gpufleet(proxy_settings: Settings, notebooks: dict[str, Notebook], origin: str) -> Iterator[str]:
    """The API (the dashboard's origin), which sends browsers to ``origin`` for notebooks."""
    app = create_app(proxy_settings.model_copy(update={"sessions_origin": origin}))
    app.state.notebook_locator = lambda _settings, session_id: notebooks.get(session_id)
    with serve_inprocess(app) as served:
        yield served.url


def open_notebook(client: httpx.Client, gpufleet: str, session_id: str) -> str:
    """What the dashboard's Open does, with ``client``'s sign-in: the notebook's single-use address."""
    r = client.post(f"{gpufleet}/api/v1/sessions/{session_id}/open", headers={"Origin": gpufleet})
    assert r.status_code == 200, r.text
    return r.json()["url"]


@dataclass(frozen=True)
class Opened:
    """What a browser holds once it opened a notebook: the notebook's cookie, and the key its page got."""

    cookie: str  # "name=value"
    key: str

    def headers(self, origin: str | None = None) -> dict[str, str]:
        """A request of the notebook's own page: the cookie, the key, and the page's ``Origin`` when given."""
        out = {"Cookie": self.cookie, "Authorization": f"token {self.key}"}
        return {**out, "Origin": origin} if origin else out


def let_in(client: httpx.Client, gpufleet: str, session_id: str, settings: Settings, token: str) -> Opened:
    """Open the notebook in ``client`` (signed in on the API): follow the ticket (a redirect within the
    notebook takes a new one along) to the answer that sets the notebook's cookie. The key is what that
    page's token became (here derived, as the proxy does: a bare jupyter_server has no lab page to read)."""
    url = open_notebook(client, gpufleet, session_id)
    origin = url.split("/sessions/", 1)[0]
    for _ in range(5):
        answer = client.get(url, follow_redirects=False)
        location = answer.headers.get("location", "")
        if answer.is_redirect and "gpufleet_ticket=" in location:
            url = origin + location
            continue
        break
    name = "gpufleet_nb_" + session_id.replace("-", "")
    assert name in answer.cookies, (answer.status_code, answer.headers)
    value = answer.cookies[name]
    held = read_pass(settings, NOTEBOOK_COOKIE_PURPOSE, value, session_id)
    assert held is not None
    return Opened(f"{name}={value}", page_key(settings, session_id, held.nonce, len(token)))
