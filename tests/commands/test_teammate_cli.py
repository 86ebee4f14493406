"""A teammate on the box runs gpufleet with nothing of their own: the CLI of a `scripts/start.sh` install,
run as a second real Unix account against the server it started.

The copy's `.venv` is the one the install made before, from `python3` (pyenv's, under /root's mode 0700 on
the development boxes and in CI): its packages hard-linked from this checkout's venv, so nothing is
downloaded but the editable install's build backend.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from support.checkout import REPO, copy_checkout, linked_venv
from support.servers import free_port
from support.unix import as_account, short_name, unix_account

pytestmark = pytest.mark.slow


def _copy_checkout(dest: Path) -> None:
    """The checkout, its built dashboard and the frontend's packages (linked)."""
    copy_checkout(dest)
    static = REPO / "backend" / "gpufleet" / "static"
    if static.is_dir():
        shutil.copytree(static, dest / "backend" / "gpufleet" / "static", dirs_exist_ok=True)
    if (REPO / "frontend" / "node_modules").is_dir():
        (dest / "frontend" / "node_modules").symlink_to(REPO / "frontend" / "node_modules")


def _earlier_venv(dest: Path) -> None:
    """``dest/.venv`` as `python3 -m venv` made it before (pyenv's under /root on the development boxes)."""
    base = subprocess.run(["python3", "-c", "import sys; print(sys._base_executable)"], capture_output=True,
                          text=True, check=True).stdout.strip()
    linked_venv(dest, Path(base))


def test_a_teammate_runs_the_cli_of_a_start_sh_install_as_their_own_account():
    if shutil.which("npm") is None:
        pytest.skip("npm is needed to build the dashboard")
    place = Path(tempfile.mkdtemp(prefix="gpufleet-team-", dir="/tmp"))
    place.chmod(0o755)  # the teammate's way to the checkout and the socket
    root = place / "checkout"
    try:
        _copy_checkout(root)
        _earlier_venv(root)
        sock_dir = place / "run"
        sock_dir.mkdir(mode=0o755)
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_") or k.startswith("GPUFLEET_TEST_")}
        env.update(GPUFLEET_DATA_DIR=str(place / "data"), GPUFLEET_UNIX_SOCKET=str(sock_dir / "gpufleet.sock"),
                   PYTHONUNBUFFERED="1")
        port = free_port()
        log = place / "start.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(["bash", "scripts/start.sh", "--port", str(port)], cwd=root, env=env,
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + 600
            while not (sock_dir / "gpufleet.sock").exists() or not _healthy(port):
                assert proc.poll() is None, log.read_text(errors="replace")
                assert time.monotonic() < deadline, log.read_text(errors="replace")
                time.sleep(0.5)
            name = short_name("tm")
            with unix_account(name) as member:
                member_env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LANG": "C.UTF-8",
                              "GPUFLEET_UNIX_SOCKET": str(sock_dir / "gpufleet.sock")}
                me = as_account(member, str(root / ".venv" / "bin" / "gpufleet"), "whoami", env=member_env,
                                cwd="/")
                assert me.returncode == 0, me.stdout + me.stderr
                assert me.stdout.split()[:3] == [name, "member", "socket"], me.stdout
                listed = as_account(member, str(root / ".venv" / "bin" / "gpufleet"), "trainings", "ls",
                                    env=member_env, cwd="/")
                assert listed.returncode == 0, listed.stdout + listed.stderr
            said = log.read_text(errors="replace")
            # start.sh checked the client as another account, and found nothing to fix.
            assert f"start: teammates run {root}/.venv/bin/gpufleet as themselves" in said, said
            assert "start: other accounts on this machine cannot run" not in said, said
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGINT)
                proc.wait(120)
    finally:
        shutil.rmtree(place, ignore_errors=True)


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False

