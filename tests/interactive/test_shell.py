"""`gpufleet session shell` on a shared box: root's `gpufleet serve` (sign-in on, embedded worker), two Unix accounts.

Each account's CLI reaches the server through its socket, so the server knows
the caller's account from the kernel. The owner's shell runs as the owner,
with the session's GPU and id; another account is refused; a machine that is
not the session's host is given the ssh command.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.accounts import run_as, unix_accounts
from support.servers import cli, serve_process, socket_path

pytestmark = [pytest.mark.slow]


@pytest.fixture
def open_root() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="gpufleet-shell-", dir="/tmp"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _ok(result) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_the_owners_shell_runs_as_the_owner_with_the_sessions_gpu_and_others_are_refused(open_root) -> None:
    data = open_root / "data"
    with unix_accounts(2) as (alice, bob), serve_process(data, GPUFLEET_AUTH=None) as srv:
        env = {"GPUFLEET_UNIX_SOCKET": str(socket_path(data)), "GPUFLEET_HOST_NAME": "sim-host"}
        _ok(run_as(alice, "whoami", env=env))  # a member of their own name from now on
        cli(data, "users", "grant", alice.name, "run_code", GPUFLEET_AUTH=None)
        started = json.loads(_ok(run_as(alice, "session", "start", "--gpus", "1", "--hours", "1", "--wait",
                                        "--json", env=env, timeout=300)))
        sid = started["id"]
        assert started["status"] == "running", (started, srv.log_tail())
        out = _ok(run_as(alice, "session", "shell", sid[:8], "--", "sh", "-c",
                         'id -un; echo "$CUDA_VISIBLE_DEVICES $GPUFLEET_SESSION_ID"', env=env))
        assert out.split() == [alice.name, str(started["gpu_ids"][0]), sid], out
        refused = run_as(bob, "session", "shell", sid, "--", "true", env=env)
        assert refused.returncode != 0 and "only its owner" in refused.stderr, refused.stderr
        # Elsewhere (this CLI's host is not the session's): the one ssh command that does the same.
        away = _ok(run_as(alice, "session", "shell", sid, env={**env, "GPUFLEET_HOST_NAME": "laptop"}))
        assert away.strip().startswith("ssh -t ") and away.strip().endswith(f"gpufleet session shell {sid}"), away
        stopped = json.loads(_ok(run_as(alice, "session", "stop", sid, "--json", env=env)))
        assert stopped["status"] in ("stopping", "stopped")
