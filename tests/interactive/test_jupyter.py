"""What a session's launcher reads of its Jupyter server: a real jupyter_server, a real kernel, a real client.

The idle rule counts a connected client (a notebook open in a browser) and a
busy kernel as use; the launcher's own polls must not count as use.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import time
from datetime import datetime

import httpx
import pytest
import websockets

from gpufleet.interactive.jupyter import activity, answers
from gpufleet.interactive.launch import SessionSpec, command
from support.servers import free_port

pytestmark = pytest.mark.slow


def _wait(fn, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (got := fn()):
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_connected_client_is_use_and_the_launchers_polls_are_not(tmp_path) -> None:
    port, token, base = free_port(), secrets.token_urlsafe(16), "/sessions/t1/"
    spec = SessionSpec(session_id="t1", progress_file=str(tmp_path / "p"), workdir=str(tmp_path), jupyter=True,
                       port=port, token=token, base_url=base)
    env = dict(os.environ, JUPYTER_TOKEN=token, HOME=str(tmp_path), JUPYTER_RUNTIME_DIR=str(tmp_path / "rt"))
    proc = subprocess.Popen(command(spec), cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT)
    try:
        _wait(lambda: answers(port, base, token), 180, "the server to answer")
        assert not answers(port, base, "wrong-token")
        # "Open" lands on JupyterLab (the sessions extra brings it), not a bare "A Jupyter Server is running."
        home = httpx.get(f"http://127.0.0.1:{port}{base}", headers={"Authorization": f"token {token}"},
                         follow_redirects=True, timeout=60)
        assert home.status_code == 200 and str(home.url).endswith(f"{base}lab"), home.url
        assert "<title>JupyterLab</title>" in home.text
        api = f"http://127.0.0.1:{port}{base}api"
        kernel = httpx.post(f"{api}/kernels", headers={"Authorization": f"token {token}"}, json={"name": "python3"},
                            timeout=60).json()["id"]
        _wait(lambda: (a := activity(port, base, token)) and a["busy_kernels"] == 0 and a, 60, "an idle kernel")

        def settled() -> str | None:
            # A new kernel's last messages can land just after it reports idle (CI saw one 0.3 s later):
            # the time counts once it held for a second. Were a poll use, it would never hold.
            first = activity(port, base, token)["active_at"]
            time.sleep(1.0)
            return first if activity(port, base, token)["active_at"] == first else None

        quiet = _wait(settled, 60, "the kernel's start to settle")
        # Polling again and again is not use: the reported time stands still.
        for _ in range(3):
            assert activity(port, base, token)["active_at"] == quiet
        assert quiet is not None and datetime.fromisoformat(quiet.replace("Z", "+00:00"))

        async def connected() -> dict:
            url = f"ws://127.0.0.1:{port}{base}api/kernels/{kernel}/channels?token={token}"
            async with websockets.connect(url):
                return await asyncio.to_thread(
                    _wait, lambda: (a := activity(port, base, token)) and a["connections"] >= 1 and a, 30,
                    "the connection to show")

        seen = asyncio.run(connected())
        assert seen["connections"] >= 1 and seen["active_at"] != quiet
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
