"""A member's sandboxed training runs and stops as any other: a recipe on two ranks, and
cancel and a worker's SIGKILL leave no rank behind.

Real worker, scheduler, API with sign-in on; the member has a Unix account
of its own name, so its ranks run as that account inside bwrap (a PID
namespace of their own), with bwrap's processes in the launcher's group.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from gpufleet.db.session import session_scope
from gpufleet.users.accounts import add_user, get_user
from gpufleet.users.tokens import create_token
from support.fleet import make_settings, pids_in_group, register, wait_for
from support.people import SECRET
from support.scripts import DDP_SCRIPT, write_project
from support.unix import need_root, short_name, unix_account

pytestmark = pytest.mark.slow


def _uid(pid: int) -> int | None:
    """The uid of a live process (None once it is gone, or a zombie)."""
    try:
        rows = dict(row.split(":", 1) for row in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in row)
    except OSError:
        return None
    return None if rows.get("State", "").strip().startswith("Z") else int(rows["Uid"].split()[0])


def _submit(base: str, token: str, project: Path) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    env.update(GPUFLEET_SERVER=base, GPUFLEET_TOKEN=token, COLUMNS="200")
    res = subprocess.run([sys.executable, "-m", "gpufleet.cli", "run", "--gpus", "2", "--memory", "1GiB",
                          "--max-restarts", "0", "--no-follow", "--", "python", "train.py", "--steps", "100000",
                          "--sleep", "0.05"], check=False, cwd=project, env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    return next(line.split()[1] for line in res.stdout.splitlines() if line.startswith("submitted "))


def _running_group(base: str, token: str, tid: str, uid: int) -> list[int]:
    h = {"Authorization": f"Bearer {token}"}

    def log() -> str:
        r = httpx.get(f"{base}/api/v1/trainings/{tid}/logs", params={"offset": 0}, headers=h, timeout=30)
        return r.json()["text"]

    wait_for(lambda: "[rank 1] step 3" in log(), 180, "both ranks training", 0.2)
    group = httpx.get(f"{base}/api/v1/trainings/{tid}", headers=h, timeout=30).json()["launcher_pid"]
    members = pids_in_group(group)
    # bwrap (outside and as the namespace's init), the launcher and two ranks; the last three as the member.
    assert len(members) >= 5 and sum(_uid(p) == uid for p in members) >= 3, members
    return members


def test_cancel_and_a_killed_worker_leave_no_sandboxed_rank(tmp_path, workers, scheduler, live_server):
    need_root()
    with unix_account(short_name("mem")) as account:
        settings = make_settings(tmp_path, "sqlite", auth="on", secret_key=SECRET)
        with session_scope(settings) as sess:
            add_user(sess, account.pw_name, "member")
            get_user(sess, account.pw_name).run_code = True
            token = create_token(sess, account.pw_name).secret
        register(settings)
        worker = workers(settings)
        scheduler(settings)
        base = live_server(settings)
        project = write_project(tmp_path / "proj", DDP_SCRIPT)
        h = {"Authorization": f"Bearer {token}"}

        tid = _submit(base, token, project)
        members = _running_group(base, token, tid, account.pw_uid)
        assert httpx.post(f"{base}/api/v1/trainings/{tid}/cancel", headers=h, timeout=30).status_code == 200
        wait_for(lambda: not any(_uid(p) is not None for p in members), 10, "every sandboxed process to end", 0.05)
        wait_for(lambda: httpx.get(f"{base}/api/v1/trainings/{tid}", headers=h, timeout=30).json()["status"]
                 == "cancelled", 60, "cancelled")

        tid = _submit(base, token, project)
        members = _running_group(base, token, tid, account.pw_uid)
        worker.kill9()
        wait_for(lambda: not any(_uid(p) is not None for p in members), 10, "every sandboxed process to end", 0.05)


def test_a_members_recipe_training_runs_its_ranks_as_the_member(tmp_path, workers, scheduler,
                                                                 live_server):
    need_root()
    with unix_account(short_name("mem")) as account:
        settings = make_settings(tmp_path, "sqlite", auth="on", secret_key=SECRET)
        with session_scope(settings) as sess:
            add_user(sess, account.pw_name, "member")
            token = create_token(sess, account.pw_name).secret
        register(settings)
        workers(settings)
        scheduler(settings)
        base = live_server(settings)
        h = {"Authorization": f"Bearer {token}"}
        r = httpx.post(f"{base}/api/v1/trainings", headers=h, timeout=60, json={
            "name": "mine", "recipe": "mlp", "world_size": 2, "config": {"max_steps": 6, "checkpoint_every": 3}})
        assert r.status_code == 201, r.text
        tid = r.json()["id"]
        body = wait_for(lambda: (b := httpx.get(f"{base}/api/v1/trainings/{tid}", headers=h, timeout=30).json())
                        ["status"] in ("succeeded", "failed") and b, 240, "the training to end", 0.3)
        assert body["status"] == "succeeded", body["status_reason"]
        steps = sorted(settings.checkpoint_root.joinpath(tid).glob("step-*"))
        assert steps and all(p.stat().st_uid == account.pw_uid for p in steps)
