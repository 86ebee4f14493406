"""scripts/start.sh in a copy of this checkout: the second start skips what is up to date,
and a start while one runs stops before it builds into the running server's folder."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from support.checkout import copy_checkout, linked_venv
from support.servers import free_port

pytestmark = pytest.mark.slow


class Start:
    """`bash scripts/start.sh --port PORT` in ``root``, its output in a file."""

    def __init__(self, root: Path, port: int, env: dict[str, str], n: int) -> None:
        self.log = root.parent / f"start-{n}.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(["bash", "scripts/start.sh", "--port", str(port)], cwd=root, env=env,
                                         stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.url = f"http://127.0.0.1:{port}"

    def said(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            assert self.proc.poll() is None, self.said()
            assert time.monotonic() < deadline, self.said()
            time.sleep(0.3)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            self.proc.wait(120)


def test_a_second_start_skips_what_is_up_to_date_and_a_start_beside_a_running_one_builds_nothing(tmp_path):
    if shutil.which("npm") is None:
        pytest.skip("npm is needed to build the dashboard")
    root = tmp_path / "checkout"
    copy_checkout(root)
    # torch and the dependencies come linked from this environment's venv (installing them is not tested).
    linked_venv(root, Path(sys._base_executable))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_") or k.startswith("GPUFLEET_TEST_")}
    # A socket of its own: the default one (/run/gpufleet as root) is the machine's, and another
    # test's or a real server's may be listening there.
    env.update(GPUFLEET_DATA_DIR=str(tmp_path / "data"), GPUFLEET_UNIX_SOCKET=str(tmp_path / "gpufleet.sock"),
               PYTHONUNBUFFERED="1")
    port = free_port()
    first = Start(root, port, env, 1)
    try:
        first.wait_healthy(600)
    finally:
        first.stop()
    said = first.said()
    assert "dashboard built into" in said, said
    # The first start says what it does before each long step, never minutes of silence.
    steps = ["start: installing gpufleet into .venv first", "install: installing gpufleet and its dependencies",
             "install: building the dashboard", "dashboard built into", "start: starting gpufleet serve"]
    assert all(s in said for s in steps) and sorted(steps, key=said.index) == steps, said
    # pytest's folders are root's alone (mode 0700): start.sh found that teammates cannot run the client
    # there, said so as it started, and named what to move.
    if os.geteuid() == 0 and shutil.which("runuser"):
        closed = next(p for p in root.parents if not p.stat().st_mode & 0o001)
        assert f"start: other accounts on this machine cannot run {root}/.venv/bin/gpufleet" in said, said
        assert f"start: to fix: the checkout is under {closed} (mode " in said, said
    static = root / "backend" / "gpufleet" / "static"
    built_at = (static / "index.html").stat().st_mtime_ns

    second = Start(root, port, env, 2)
    try:
        second.wait_healthy(120)
        said = second.said()
        assert "pip skipped" in said and "npm ci skipped" in said and "build skipped" in said, said
        assert "added" not in said and "vite" not in said and "dashboard built" not in said, said
        # A third start while the second runs: one line, and nothing built into the folder it serves.
        third = subprocess.run(["bash", "scripts/start.sh", "--port", str(port)], cwd=root, env=env,
                               capture_output=True, text=True, timeout=120)
        assert third.returncode == 2, third.stdout + third.stderr
        assert f"cannot listen on 127.0.0.1:{port}" in third.stderr, third.stderr
        assert "listening on" not in third.stdout + third.stderr and third.stdout == "", third.stdout
        assert (static / "index.html").stat().st_mtime_ns == built_at
        assert httpx.get(f"{second.url}/healthz", timeout=10).status_code == 200
    finally:
        second.stop()
    assert (static / "index.html").stat().st_mtime_ns == built_at

    # A changed source is built again (the stamps do not skip everything).
    app = next((root / "frontend" / "src").glob("main.tsx"))
    app.write_text(app.read_text() + "\n// changed\n")
    again = subprocess.run(["bash", "scripts/build-frontend.sh"], cwd=root, capture_output=True, text=True,
                           timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "npm ci skipped" in again.stdout and "dashboard built into" in again.stdout, again.stdout
