"""The stop contract, resume and files with a real worker: `gpufleet run`, a real server, scheduler, Celery
worker and rank processes (simulated GPUs: the ranks run on CPU with gloo).

The script keeps the contract as docs/README say (engine/stopfile.py): it records SIGTERM, looks at the
stop marker every step and checkpoints when asked.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from gpufleet.db.models import TrainingMetric
from gpufleet.db.session import session_scope
from support.fleet import make_settings, pids_in_group, register, wait_for
from gpufleet.users.accounts import add_user, get_user
from gpufleet.users.tokens import create_token
from support.people import SECRET
from support.unix import short_name, unix_account

from support.scripts import STOP_AWARE_SCRIPT, write_project

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]
FINAL = ("succeeded", "failed", "cancelled", "reclaimed")


def _cli(base: str, cwd: Path, *args: str, token: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    env.update(GPUFLEET_SERVER=base, COLUMNS="200", **({"GPUFLEET_TOKEN": token} if token else {}))
    return subprocess.run([sys.executable, "-m", "gpufleet.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def _submit(base: str, project: Path, token: str | None = None, sizing: tuple[str, ...] = ("--memory", "1GiB"),
            extra: tuple[str, ...] = ()) -> str:
    (project / "salt.txt").write_text(uuid.uuid4().hex)  # its own code hash in the shared database
    res = _cli(base, project, "run", "--gpus", "2", *sizing, "--no-follow", "--",
               "python", "train.py", "--steps", "100000", "--sleep", "0.05", *extra, token=token)
    assert res.returncode == 0, res.stdout + res.stderr
    return next(line.split()[1] for line in res.stdout.splitlines() if line.startswith("submitted "))


class Api:
    def __init__(self, base: str, token: str | None = None):
        self.base, self.headers = f"{base}/api/v1/trainings", {"Authorization": f"Bearer {token}"} if token else {}

    def get(self, tid: str, sub: str = "", **kw) -> httpx.Response:
        return httpx.get(f"{self.base}/{tid}{sub}", headers={**self.headers, **kw.pop("headers", {})}, timeout=30,
                         **kw)

    def body(self, tid: str) -> dict:
        return self.get(tid).json()

    def log(self, tid: str) -> str:
        return self.get(tid, "/logs", params={"offset": 0}).json()["text"]

    def events(self, tid: str) -> list[dict]:
        return self.get(tid, "/events").json()["data"]


def _steps(settings, tid: str) -> list[int]:
    with session_scope(settings) as sess:
        return sorted(sess.execute(select(TrainingMetric.step).where(
            TrainingMetric.training_id == uuid.UUID(tid))).scalars())


def test_a_script_that_keeps_the_stop_contract_checkpoints_on_a_worker_stop_and_a_preemption_and_resumes(
        tmp_path, request, workers, scheduler, live_server):
    settings = make_settings(tmp_path, "postgresql", request, lease_s=3.0, stop_grace_s=60.0)
    register(settings)
    w = workers(settings)
    scheduler(settings)
    base = live_server(settings)
    api = Api(base)
    # Whole GPUs (no --memory), so a training of higher priority must preempt it to run.
    tid = _submit(base, write_project(tmp_path / "proj", STOP_AWARE_SCRIPT), sizing=("--preemptible",))
    body = wait_for(lambda: (b := api.body(tid))["step"] >= 5 and b, 180, "a few reported steps", 0.2)
    # report(total_steps=...) gives progress a total; rank 0's carriage-return progress reads as its latest state.
    assert body["max_steps"] == 100000
    wait_for(lambda: api.log(tid).count("[rank 0] progress ") == 1, 30, "the progress line, live", 0.2)
    group = body["launcher_pid"]

    w.proc.send_signal(signal.SIGTERM)
    w.proc.wait(settings.stop_grace_s + 30)
    wait_for(lambda: not pids_in_group(group), 5, "the launcher group to be gone")
    log = api.log(tid)
    stopped_at = int(log.split("checkpointed on stop at step ", 1)[1].split()[0])
    retry = [e for e in api.events(tid) if e["kind"] == "retry"]
    assert len(retry) == 1 and retry[0]["data"]["retry_kind"] == "interrupted", retry
    reason = retry[0]["reason"]
    assert f"it checkpointed at step {stopped_at} within the grace" in reason, reason
    assert f"it will resume from step {stopped_at}" in reason and "not counted as a restart" in reason, reason
    assert not [e for e in api.events(tid) if e["kind"] == "error"]  # a graceful stop is no error
    body = api.body(tid)
    assert body["status"] in ("queued", "scheduled") and body["restarts"] == 0, body
    assert body["last_checkpoint"].endswith(f"step-{stopped_at:06d}.pt")
    # The progress bar's redraws never pile up into one line.
    assert not [line for line in log.splitlines() if line.count("progress ") > 1]

    workers(settings)  # a new worker resumes it from that checkpoint
    wait_for(lambda: f"at step {stopped_at}" in api.log(tid).partition("resumed from ")[2], 180,
             "the resumed attempt", 0.2)
    body = wait_for(lambda: (b := api.body(tid))["step"] > stopped_at + 2 and b, 120, "progress past the stop", 0.2)
    assert body["attempt"] == 2 and body["restarts"] == 0
    resumed = api.log(tid).split("resumed from ", 1)[1].split()[0]
    assert Path(resumed).name == f"step-{stopped_at:06d}.pt"  # a real checkpoint, never gpufleet's fence.json
    assert _steps(settings, tid)[:stopped_at + 2] == list(range(1, stopped_at + 3))
    _preempt_and_resume(api, tid, stopped_at)
    assert httpx.post(f"{api.base}/{tid}/cancel", timeout=30).status_code == 200
    wait_for(lambda: api.body(tid)["status"] in FINAL, 60, "the cancel")


def _preempt_and_resume(api: Api, tid: str, earlier: int) -> None:
    """A preemption asks the same of the script: it checkpoints within the grace, and resumes from that step."""
    r = httpx.post(api.base, json={"name": "urgent", "recipe": "mlp", "world_size": 2, "priority": 10,
                                   "preemptible": False, "config": {"max_steps": 3, "global_batch_size": 8}},
                   timeout=30)
    assert r.status_code == 201, r.text
    urgent = r.json()["id"]
    ends = wait_for(lambda: [e for e in api.events(tid) if e["status"] == "preempted"], 180, "the preemption", 0.2)
    reason = ends[0]["reason"]
    assert f"preempted by training {urgent}" in reason and "it checkpointed at step " in reason, reason
    at = int(reason.split("it checkpointed at step ", 1)[1].split()[0])
    assert at > earlier and f"it is requeued and it will resume from step {at}" in reason, reason
    assert wait_for(lambda: (b := api.body(urgent))["status"] in FINAL and b, 180, "the urgent one")["status"] \
        == "succeeded"
    wait_for(lambda: (log := api.log(tid)).count("resumed from ") == 2 and f"at step {at}" in
             log.rpartition("resumed from ")[2], 180, "the third attempt", 0.2)
    body = wait_for(lambda: (b := api.body(tid))["step"] > at + 2 and b, 120, "progress past the preemption", 0.2)
    assert body["attempt"] == 3 and body["restarts"] == 0
    assert api.log(tid).rsplit("resumed from ", 1)[1].split()[0].endswith(f"step-{at:06d}.pt")


def test_resume_after_cancel_continues_past_the_checkpoint_and_only_the_owner_downloads_it(
        tmp_path, request, workers, scheduler, live_server):
    # The member's trainings run as their Unix account of the same name; the other member runs nothing.
    with unix_account(short_name("own")) as account:
        _resume_after_cancel(tmp_path, request, workers, scheduler, live_server, account.pw_name)


def _resume_after_cancel(tmp_path, request, workers, scheduler, live_server, alice: str) -> None:
    settings = make_settings(tmp_path, "postgresql", request, lease_s=3.0, stop_grace_s=60.0, auth="on",
                             secret_key=SECRET)
    register(settings)
    bob_name = short_name("bob")
    with session_scope(settings) as sess:
        add_user(sess, alice, "member")
        get_user(sess, alice).run_code = True
        add_user(sess, bob_name, "member")
        alice_token, bob_token = create_token(sess, alice).secret, create_token(sess, bob_name).secret
    workers(settings)
    scheduler(settings)
    base = live_server(settings)
    api, bob = Api(base, alice_token), Api(base, bob_token)
    project = write_project(tmp_path / "proj", STOP_AWARE_SCRIPT)
    tid = _submit(base, project, token=alice_token)
    body = wait_for(lambda: ((b := api.body(tid))["step"] >= 5 or b["status"] in FINAL) and b, 180,
                    "a few reported steps", 0.2)
    assert body["step"] >= 5, (body["status"], body["status_reason"], api.log(tid)[-3000:])
    assert httpx.post(f"{api.base}/{tid}/cancel", headers=api.headers, timeout=30).status_code == 200
    body = wait_for(lambda: (b := api.body(tid))["status"] in FINAL and b, 60, "the cancel", 0.2)
    assert body["status"] == "cancelled"
    # Even a cancel's short grace is enough for this script to checkpoint.
    stopped_at = int(api.log(tid).split("checkpointed on stop at step ", 1)[1].split()[0])

    listed = api.get(tid, "/files").json()["data"]
    path = f"checkpoints/step-{stopped_at:06d}.pt"
    assert path in [f["path"] for f in listed] and "checkpoints/fence.json" not in [f["path"] for f in listed]
    on_disk = (settings.checkpoint_root / tid / f"step-{stopped_at:06d}.pt").read_bytes()
    whole = api.get(tid, f"/files/{path}")
    assert whole.status_code == 200 and whole.content == on_disk
    part = api.get(tid, f"/files/{path}", headers={"Range": "bytes=10-99"})
    assert part.status_code == 206 and part.content == on_disk[10:100]
    assert bob.get(tid, "/files").status_code == 403 and bob.get(tid, f"/files/{path}").status_code == 403
    got = _cli(base, tmp_path, "trainings", "download", tid, path, "-o", str(tmp_path / "mine.pt"),
               token=alice_token)
    assert got.returncode == 0 and (tmp_path / "mine.pt").read_bytes() == on_disk, got.stderr
    refused = _cli(base, tmp_path, "trainings", "download", tid, path, token=bob_token)
    assert refused.returncode == 2 and "only its owner and admins" in refused.stderr, refused.stderr

    res = _cli(base, tmp_path, "trainings", "resume", tid, token=alice_token)
    assert res.returncode == 0 and "queued" in res.stdout, res.stdout + res.stderr
    wait_for(lambda: f"at step {stopped_at}" in api.log(tid).partition("resumed from ")[2], 180,
             "the resumed attempt", 0.2)
    body = wait_for(lambda: (b := api.body(tid))["step"] > stopped_at + 2 and b, 120, "progress past it", 0.2)
    assert body["status"] == "running" and body["attempt"] == 2 and body["restarts"] == 0
    assert _steps(settings, tid)[:stopped_at + 2] == list(range(1, stopped_at + 3))
    assert httpx.post(f"{api.base}/{tid}/cancel", headers=api.headers, timeout=30).status_code == 200
    wait_for(lambda: api.body(tid)["status"] in FINAL, 60, "the cancel")


def test_a_checkpoint_written_within_a_cancels_grace_is_found_named_and_resumed_from_after_the_kill(
        tmp_path, request, workers, scheduler, live_server):
    """The ranks checkpoint on the cancel, then stay past its short grace: the kill takes the launcher with them
    before it can report that file, so the worker finds it, and the events, the end and `resume` all name it."""
    # A lease well past the cancel's grace: what is judged here is the grace, not the lease.
    settings = make_settings(tmp_path, "postgresql", request, lease_s=10.0, stop_grace_s=60.0)
    register(settings)
    workers(settings)
    scheduler(settings)
    base = live_server(settings)
    api = Api(base)
    tid = _submit(base, write_project(tmp_path / "proj", STOP_AWARE_SCRIPT), extra=("--linger", "600"))
    # Past the regular checkpoint at step 50: the one written in the grace is not the newest reported.
    wait_for(lambda: [e for e in api.events(tid) if e["kind"] == "checkpoint"] and api.body(tid)["step"] >= 53, 300,
             "the checkpoint at step 50 and a few steps more", 0.2)
    assert httpx.post(f"{api.base}/{tid}/cancel", timeout=30).status_code == 200
    body = wait_for(lambda: (b := api.body(tid))["status"] in FINAL and b, 120, "the cancel", 0.2)
    log = api.log(tid)
    assert body["status"] == "cancelled", body
    at = int(log.split("checkpointed on stop at step ", 1)[1].split()[0])
    name = f"step-{at:06d}.pt"
    checkpoints = [e for e in api.events(tid) if e["kind"] == "checkpoint"]
    assert checkpoints[0]["data"]["step"] == 50 and checkpoints[0]["reason"] == "checkpoint at step 50: step-000050.pt"
    assert checkpoints[-1]["data"]["step"] == at and name in checkpoints[-1]["reason"], checkpoints
    ended = [e for e in api.events(tid) if e["status"] == "cancelled"][-1]["reason"]
    assert f"it checkpointed at step {at} within the grace ({name})" in ended, ended
    assert f"`gpufleet trainings resume` continues from {name}" in ended, ended
    assert body["last_checkpoint"].endswith(name), body

    res = _cli(base, tmp_path, "trainings", "resume", tid)
    assert res.returncode == 0 and f"continues from its newest checkpoint ({name})" in res.stdout, res.stdout
    wait_for(lambda: f"at step {at}" in api.log(tid).partition("resumed from ")[2], 300, "the resumed attempt", 0.2)
    assert Path(api.log(tid).split("resumed from ", 1)[1].split()[0]).name == name
    assert httpx.post(f"{api.base}/{tid}/cancel", timeout=30).status_code == 200
    wait_for(lambda: api.body(tid)["status"] in FINAL, 120, "the cancel")
