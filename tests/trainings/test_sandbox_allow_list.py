"""The sandbox shows a member's code what is on its allow-list, wherever the server was started.

The worker runs as ``python -m gpufleet.jobs.worker``, so the folder it was
started in is the first of its import paths. A server started from the data
dir's parent (or from ``/tmp``, which the sandbox makes private) once bound
that folder into every sandbox after the data dir's mask: the member's code
saw the real data dir, closed to it, and every cold launch failed ("cannot
read the launch spec ... Permission denied"). Through a real `gpufleet serve`
as root, a real member account and her first (cold) script, started in both.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.fleet import wait_for
from support.scripts import write_project
from support.servers import STRONG_SECRET, cli, make_token, serve_process
from support.unix import need_root, short_name, unix_account

pytestmark = pytest.mark.slow

# What a member's script can find of the data dir (argv[1]) and of the folder above it.
LOOK_AROUND = """\
import json, os, sys
data = sys.argv[1]
seen, errors = [], []
for top, dirs, files in os.walk(data, onerror=lambda e: errors.append(f"{e.filename}: {e.strerror}")):
    seen += [os.path.relpath(os.path.join(top, n), data) for n in dirs + files]
try:
    above = sorted(os.listdir(os.path.dirname(data)))
except OSError as exc:
    above = [f"error: {exc}"]
with open(os.path.join(os.environ["GPUFLEET_OUTPUT_DIR"], "seen.json"), "w") as fh:
    json.dump({"seen": sorted(seen), "errors": errors, "above": above}, fh)
"""


@pytest.fixture
def open_root() -> Iterator[Path]:
    """A folder every account may enter (pytest's own is root's alone), so an owner can reach their outputs."""
    root = Path(tempfile.mkdtemp(prefix="gpufleet-cwd-", dir="/tmp"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _own(rel: str, tid: str, member: str) -> bool:
    """Whether ``rel`` (a path in the data dir) is the training's own, or a folder on the way to it."""
    parts = Path(rel).parts
    if parts[0] not in ("jobs", "checkpoints", "outputs", "work", "envs"):
        return False
    return len(parts) == 1 or parts[1] == (member if parts[0] == "envs" else tid)


@pytest.mark.parametrize("where", ["data dir's parent", "/tmp"])
def test_a_cold_script_runs_and_sees_only_its_own_folders_wherever_the_server_was_started(where, open_root,
                                                                                          tmp_path):
    need_root()
    data = open_root / "data"
    cwd = open_root if where == "data dir's parent" else Path("/tmp")
    member = short_name("cwd")
    env = {"GPUFLEET_AUTH": "on", "GPUFLEET_SECRET_KEY": STRONG_SECRET}
    with unix_account(member) as account:
        token = make_token(data, member, "member", **env)
        cli(data, "users", "grant", member, "run_code", **env)
        with serve_process(data, cwd=cwd, **env) as srv:
            (data / "secret-of-the-server").write_text("root's own")  # a file of the data dir's own
            project = write_project(tmp_path / "proj", LOOK_AROUND)
            run_env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
            run_env.update(GPUFLEET_SERVER=srv.url, GPUFLEET_TOKEN=token, COLUMNS="200")
            res = subprocess.run([sys.executable, "-m", "gpufleet.cli", "run", "--gpus", "1", "--memory", "1GiB",
                                  "--no-follow", "--", "python", "train.py", str(data)], check=False, cwd=project,
                                 env=run_env, capture_output=True, text=True, timeout=300)
            assert res.returncode == 0, res.stdout + res.stderr
            tid = next(line.split()[1] for line in res.stdout.splitlines() if line.startswith("submitted "))

            def api(path: str, **kw) -> httpx.Response:
                return httpx.get(f"{srv.url}/api/v1{path}", headers={"Authorization": f"Bearer {token}"},
                                 timeout=60, **kw)

            body = wait_for(lambda: (b := api(f"/trainings/{tid}").json())["status"] in
                            ("succeeded", "failed", "cancelled") and b, 300, f"training {tid} to end", 0.3)
            log = api(f"/trainings/{tid}/logs", params={"offset": 0}).json()["text"]
            assert body["status"] == "succeeded", (body["status_reason"], log[-3000:])
            assert "warm launcher" not in log  # her first script: a cold launch, the one that failed
            found = json.loads((data / "outputs" / tid / "seen.json").read_text())
            assert found["seen"], found  # it saw its own folders
            # Nothing of the data dir but the training's own folders (and the folders on the way to them)...
            assert [p for p in found["seen"] if not _own(p, tid, member)] == [], found
            assert not found["errors"], found
            # ...and nothing beside it: not the server's log in the folder it was started from.
            assert set(found["above"]) <= {"data"}, found
            assert found["seen"] and account.pw_uid != 0
