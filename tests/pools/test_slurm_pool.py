"""Trainings on a real Slurm cluster (tests/support/slurm.py), as their owner's own Unix account.

Each test drives the pools' loop step by step (``gpufleet.jobs.pool_loop.step``, what
the API process runs every two seconds) and reads what the training's row,
events, metrics and log say, and what Slurm itself says of the job.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, update

from gpufleet.db.pools import Pool, PoolJob
from gpufleet.db.session import session_scope, write_session
from gpufleet.jobs.logs import log_path
from gpufleet.lifecycle.models import Training, TrainingEvent, TrainingMetric
from gpufleet.db.types import utcnow
from gpufleet.jobs import pool_loop as loop, pool_watch as watch
from gpufleet.pools import placement, service
from gpufleet.scheduling.quotas import _week_hours
from gpufleet.users.usage import usage_report
from gpufleet.trainings import code
from gpufleet.trainings import service as trainings
from gpufleet.trainings.admission.checks import FleetCannotHold
from gpufleet.wire.training_requests import TrainingCreate, TrainingResume
from gpufleet.trainings.resume import resume
from gpufleet.users.accounts import add_user
from support.fleet import make_settings, register, wait_for
from support.scripts import RESUMABLE_SCRIPT, STOP_AWARE_SCRIPT, tar_of
from support.slurm import NODES, PARTITION, SCRIPT, slurm, slurm_cluster  # noqa: F401 - the fixture
from support.unix import short_name, unix_account

TINY = {"max_steps": 6, "global_batch_size": 8, "checkpoint_every": 3, "synthetic_samples": 64}


@pytest.fixture
def pool_settings(tmp_path: Path, slurm_cluster):  # noqa: F811
    s = make_settings(tmp_path, "sqlite")
    root = Path(tempfile.mkdtemp(prefix="gpufleet-pool-"))
    root.chmod(0o755)
    with write_session(s) as sess:
        service.add(sess, s, service.PoolSpec(name="cluster", options={"partition": PARTITION}, gpus_per_node=2,
                                              checkpoint_root=str(root)))
    return s


@pytest.fixture
def member(pool_settings):
    name = short_name("sl")
    with unix_account(name) as entry:
        with write_session(pool_settings) as sess:
            add_user(sess, name, "member")
        yield entry


def _submit(settings, owner: str, name: str, config: dict, world_size: int = 1) -> uuid.UUID:
    req = TrainingCreate(name=name, recipe="mlp", config=config, world_size=world_size, pool="cluster")
    with write_session(settings) as sess:
        return service.create_training(sess, settings, req, owner).id


def _row(settings, tid: uuid.UUID) -> Training:
    with session_scope(settings) as sess:
        t = sess.get(Training, tid)
        sess.expunge(t)
        return t


def _until(settings, tid: uuid.UUID, ok, what: str, timeout: float = 240) -> Training:
    def check() -> Training | None:
        loop.step(settings)
        t = _row(settings, tid)
        return t if ok(t) else None
    return wait_for(check, timeout, what, every=0.5)


def _events(settings, tid: uuid.UUID) -> list[str]:
    with session_scope(settings) as sess:
        return [e.reason or "" for e in sess.scalars(select(TrainingEvent).where(
            TrainingEvent.training_id == tid).order_by(TrainingEvent.seq))]


def _job(settings, tid: uuid.UUID) -> PoolJob:
    with session_scope(settings) as sess:
        job = sess.scalars(select(PoolJob).where(PoolJob.training_id == tid).order_by(PoolJob.attempt.desc())).first()
        sess.expunge(job)
        return job


def test_a_recipe_succeeds_on_the_pool_as_its_owner(pool_settings, member, slurm_cluster) -> None:  # noqa: F811
    tid = _submit(pool_settings, member.pw_name, "on-slurm", TINY)
    _until(pool_settings, tid, lambda t: t.status != "queued", "the job to start")
    # slurmctld restarted while the job runs: it recovers its jobs from its saved state, and nothing is lost.
    subprocess.run(["bash", str(SCRIPT), "restart-ctld", str(slurm_cluster)], check=True, timeout=60)
    t = _until(pool_settings, tid, lambda t: t.status in ("succeeded", "failed", "cancelled"), "the job to end")
    assert t.status == "succeeded", (t.status_reason, _events(pool_settings, tid))
    job = _job(pool_settings, tid)
    # Slurm ran it as the member's account: its own record says so, and the checkpoints are that account's.
    assert f"UserId={member.pw_name}({member.pw_uid})" in slurm("scontrol", "show", "job", job.job_id)
    ckpt = Path(service.get_root(pool_settings, "cluster")) / str(tid) / "checkpoints"
    steps = sorted(p.name for p in ckpt.iterdir() if p.name.startswith("step-"))
    assert steps and all(os.stat(ckpt / s).st_uid == member.pw_uid for s in steps)
    events = " | ".join(_events(pool_settings, tid))
    assert f"as job {job.job_id}, as Unix account {member.pw_name}" in events
    assert any(f"running in Slurm pool cluster on {node} " in events for node in NODES), events
    with session_scope(pool_settings) as sess:
        steps_seen = sorted(sess.scalars(select(TrainingMetric.step).where(TrainingMetric.training_id == tid)))
    assert steps_seen and steps_seen[-1] == TINY["max_steps"]
    assert t.step == TINY["max_steps"] and t.exit_code == 0
    # The job's output reached the training's log.
    assert f"Slurm job {job.job_id} on {job.nodes}: ranks on cuda:" in log_path(pool_settings, tid).read_text()

    # Resume: a new job, which continues from the newest checkpoint (step 6), not from the start.
    with write_session(pool_settings) as sess:
        resume(sess, tid, TrainingResume(config={"max_steps": 9}), member.pw_name)
    t = _until(pool_settings, tid, lambda t: t.status in ("succeeded", "failed", "cancelled"), "the resumed job")
    assert t.status == "succeeded" and t.step == 9, t.status_reason
    second = _job(pool_settings, tid)
    assert second.attempt == job.attempt + 1 and second.job_id != job.job_id
    lines = [json.loads(x) for x in (ckpt.parent / f"progress-{second.attempt}.jsonl").read_text().splitlines()]
    assert [(x["step"], Path(x["path"]).name) for x in lines if x["type"] == "resume"] == [(6, "step-6")]

    # Usage: each job's GPUs from Slurm's start to its end, as Slurm's own accounting has it (this cluster
    # keeps its job-completion log, jobcomp/filetxt), in the usage report beside the team's hosts and in
    # the weekly GPU-hour quota's count.
    # The pools' loop accounts every 15 s too, and slurmctld writes its log a moment after a job ends: on a
    # loaded machine either may come first, so the test asks until both jobs have their record.
    def accounted() -> bool:
        watch.account(pool_settings)
        with session_scope(pool_settings) as sess:
            return all(sess.get(PoolJob, a.id).accounted_by for a in (job, second))

    wait_for(accounted, 60, "Slurm's records of both jobs", every=1.0)
    held = 0.0
    for attempt in (job, second):
        with session_scope(pool_settings) as sess:
            row = sess.get(PoolJob, attempt.id)
        assert (row.accounted_by, row.gpus) == ("jobcomp", 1)
        [record] = [x for x in (slurm_cluster / "jobcomp.log").read_text().splitlines()
                    if f"JobId={row.job_id} " in x]
        for field, value in (("StartTime", row.run_start), ("EndTime", row.run_end)):
            assert f"{field}={value.astimezone().strftime('%Y-%m-%dT%H:%M:%S')} " in record
        held += (row.run_end - row.run_start).total_seconds() * row.gpus
    assert held > 0
    today = utcnow().date()
    with session_scope(pool_settings) as sess:
        rows = [r for r in usage_report(sess, "user", today - timedelta(days=1), today) if r.name == member.pw_name]
        week = _week_hours(sess, [member.pw_name], utcnow(), "booked")  # no bookings: as booked is as used
    assert sum(r.gpu_seconds_pool for r in rows) == pytest.approx(held)
    assert sum(r.gpu_seconds_held for r in rows) == pytest.approx(held)
    assert week * 3600 == pytest.approx(held)


def test_a_job_that_ran_whole_between_two_polls_keeps_its_curve(pool_settings, member) -> None:
    tid = _submit(pool_settings, member.pw_name, "quick", {**TINY, "log_every": 1})
    while not _row(pool_settings, tid).lease_owner:  # submitted, and then not looked at until Slurm is done
        loop.step(pool_settings)
    job = _job(pool_settings, tid)
    wait_for(lambda: slurm("squeue", "-h", "-t", "all", "-j", job.job_id, "-o", "%T").strip() == "COMPLETED", 120,
             "the job to complete in Slurm")
    t = _until(pool_settings, tid, lambda t: t.status != "queued", "the training to end")
    assert t.status == "succeeded" and t.step == TINY["max_steps"], t.status_reason
    assert _steps(pool_settings, tid) == list(range(1, TINY["max_steps"] + 1))


def test_a_pending_job_shows_slurms_reason_and_a_cancel_removes_it(pool_settings, member) -> None:
    blocker = slurm("sbatch", "--parsable", f"--nodes={len(NODES)}", "--gres=gpu:2", "--output=/dev/null",
                    "--wrap", "sleep 120").strip()  # every GPU of every node
    try:
        tid = _submit(pool_settings, member.pw_name, "waits", TINY)
        t = _until(pool_settings, tid, lambda t: t.wait_reason and "pending" in t.wait_reason, "a pending reason")
        job = _job(pool_settings, tid)

        def slurms_own() -> str:  # what Slurm gives as the reason now (None, then Priority or Resources)
            return slurm("squeue", "-h", "-j", job.job_id, "-o", "%r").strip()
        t = _until(pool_settings, tid, lambda t: f"(Slurm: {slurms_own()})" in (t.wait_reason or ""),
                   "the wait reason to be Slurm's")
        assert t.status == "queued" and t.wait_reason.startswith(f"Slurm job {job.job_id} is pending: ")
        assert slurms_own() in ("Resources", "Priority")
        with write_session(pool_settings) as sess:
            assert trainings.cancel(sess, tid, member.pw_name).status == "cancelled"
        wait_for(lambda: loop.step(pool_settings) or "CANCELLED" in slurm(
            "squeue", "-h", "-t", "all", "-j", job.job_id, "-o", "%T"), 30, "the pending job cancelled in Slurm")
    finally:
        slurm("scancel", blocker)


def test_cancel_signals_the_ranks_and_scancel_from_outside_ends_cancelled(pool_settings, member) -> None:
    """Two trainings at once on the node's two GPUs: one cancelled in gpufleet, one by scancel outside it."""
    long = {**TINY, "max_steps": 1000000, "checkpoint_every": 1000000}
    ours = _submit(pool_settings, member.pw_name, "ours", long)
    theirs = _submit(pool_settings, member.pw_name, "theirs", long)
    for tid in (ours, theirs):
        _until(pool_settings, tid, lambda t: t.status == "running" and t.step > 0, "the job to run and report steps")
    with write_session(pool_settings) as sess:
        trainings.cancel(sess, ours, member.pw_name)
    slurm("scancel", _job(pool_settings, theirs).job_id)
    t = _until(pool_settings, ours, lambda t: t.status != "running", "the cancelled training to end")
    assert t.status == "cancelled" and "was signalled and stopped" in t.status_reason, t.status_reason
    # SIGTERM is the stop contract: the ranks checkpointed before they stopped.
    ckpt = Path(service.get_root(pool_settings, "cluster")) / str(ours) / "checkpoints"
    assert any(p.name.startswith("step-") for p in ckpt.iterdir())
    t = _until(pool_settings, theirs, lambda t: t.status != "running", "the scancelled training to end")
    assert t.status == "cancelled"
    assert "was cancelled outside gpufleet" in t.status_reason


def test_a_pool_training_is_checked_against_the_pools_nodes_not_the_teams_hosts(pool_settings, member) -> None:
    # The team has no host with two GPUs here (none at all); the pool's nodes have 2 GPUs each.
    tid = _submit(pool_settings, member.pw_name, "wide", TINY, world_size=2)
    row = _row(pool_settings, tid)
    assert (row.status, row.pool, row.world_size) == ("queued", "cluster", 2)


def test_a_member_without_an_account_of_their_own_is_refused(pool_settings) -> None:
    name = short_name("nx")
    with write_session(pool_settings) as sess:
        add_user(sess, name, "member")
    with pytest.raises(service.PoolError, match="no Unix account of their own") as err:
        _submit(pool_settings, name, "refused", TINY)
    assert err.value.status == 403
    with session_scope(pool_settings) as sess:
        assert sess.scalar(select(Training.id).where(Training.owner == name)) is None


def _script(settings, owner: str, name: str, source: str, argv: list[str], world_size: int = 2,
            **where: str) -> uuid.UUID:
    """The script as a training of ``owner``'s, in the pool (or where ``where`` says: ``or_pool``, ``memory``)."""
    with write_session(settings) as sess:
        info, _ = code.store(sess, settings, tar_of([("file", "train.py", source),
                                                     ("file", "salt.txt", uuid.uuid4().hex)]), owner)
        fields = {"memory": "1GiB", **where} if where else {"memory": "1GiB", "pool": "cluster"}
        req = TrainingCreate(kind="script", name=name, code=info.hash, argv=argv, world_size=world_size, **fields)
        return placement.create_placed(sess, settings, req, owner).training.id


def _steps(settings, tid: uuid.UUID) -> list[int]:
    with session_scope(settings) as sess:
        return sorted(sess.scalars(select(TrainingMetric.step).where(TrainingMetric.training_id == tid)))


def test_a_members_script_succeeds_on_the_pool_as_its_owner(pool_settings, member) -> None:
    """The member's own torchrun-style script (gloo DDP, gpufleet.report, its own checkpoints), unchanged."""
    tid = _script(pool_settings, member.pw_name, "script-on-slurm", RESUMABLE_SCRIPT,
                  ["python", "train.py", "--steps", "6"])
    t = _until(pool_settings, tid, lambda t: t.status in ("succeeded", "failed", "cancelled"), "the job to end")
    assert t.status == "succeeded", (t.status_reason, _events(pool_settings, tid),
                                     log_path(pool_settings, tid).read_text()[-3000:])
    job = _job(pool_settings, tid)
    assert f"UserId={member.pw_name}({member.pw_uid})" in slurm("scontrol", "show", "job", job.job_id)
    home = Path(service.get_root(pool_settings, "cluster")) / str(tid)
    # Its code was unpacked for it, as its account; its checkpoints are its own files, its account's.
    assert os.stat(home / "work" / "train.py").st_uid == member.pw_uid
    ckpts = sorted((home / "checkpoints").glob("step-*.pt"))
    assert [p.name for p in ckpts] == ["step-000002.pt", "step-000004.pt", "step-000006.pt"]
    assert all(p.stat().st_uid == member.pw_uid for p in ckpts)
    # Its reports reached the charts, and its ranks' output the training's log.
    assert _steps(pool_settings, tid) == [1, 2, 3, 4, 5, 6] and t.step == 6
    log = log_path(pool_settings, tid).read_text()
    assert f"Slurm job {job.job_id} on {job.nodes}: the script's 2 rank(s)" in log and "step 6 loss" in log

    # Resume: the next job's script is handed the newest checkpoint (GPUFLEET_RESUME_FROM).
    with write_session(pool_settings) as sess:
        resume(sess, tid, TrainingResume(), member.pw_name)
    t = _until(pool_settings, tid, lambda t: t.status in ("succeeded", "failed", "cancelled") and t.attempt == 2,
               "the resumed job")
    assert t.status == "succeeded", t.status_reason
    resumed = f"resumed from {home / 'checkpoints' / 'step-000006.pt'} at step 6"
    assert resumed in log_path(pool_settings, tid).read_text()


def test_a_script_that_fails_on_the_pool_says_why_from_its_output(pool_settings, member) -> None:
    """The reason names the script's own error, where it said "ended FAILED with exit code 1" alone."""
    source = "import sys\nprint('loading the data', flush=True)\nraise SystemExit('no data at /data/set-a')\n"
    tid = _script(pool_settings, member.pw_name, "fails-on-slurm", source, ["python", "train.py"], world_size=1)
    t = _until(pool_settings, tid, lambda t: t.status in ("succeeded", "failed", "cancelled"), "the job to end")
    assert t.status == "failed", t.status_reason
    assert "its output ends: " in t.status_reason and "no data at /data/set-a" in t.status_reason, t.status_reason


def test_a_script_cancelled_on_the_pool_checkpoints_before_it_stops(pool_settings, member) -> None:
    tid = _script(pool_settings, member.pw_name, "stoppable", STOP_AWARE_SCRIPT,
                  ["python", "train.py", "--sleep", "0.2"], world_size=1)
    _until(pool_settings, tid, lambda t: t.status == "running" and t.step >= 3, "the script to report steps")
    with write_session(pool_settings) as sess:
        trainings.cancel(sess, tid, member.pw_name)
    t = _until(pool_settings, tid, lambda t: t.status != "running", "the cancelled script to end")
    assert t.status == "cancelled" and "was signalled and stopped" in t.status_reason, t.status_reason
    # The stop file and Slurm's TERM reached it: it saved where it was (not at a 50-step mark) and left.
    assert "checkpointed on stop at step" in log_path(pool_settings, tid).read_text()
    home = Path(service.get_root(pool_settings, "cluster")) / str(tid)
    assert any(int(p.stem.split("-")[1]) % 50 for p in (home / "checkpoints").glob("step-*.pt"))


def test_a_recipe_wider_than_a_node_runs_over_two_nodes_as_one_training(pool_settings, member) -> None:
    """4 GPUs on a pool of 2-GPU nodes: one job over both nodes, one launcher each, one gang of 4 ranks."""
    tid = _submit(pool_settings, member.pw_name, "two-nodes", {**TINY, "log_every": 1}, world_size=4)
    t = _until(pool_settings, tid, lambda t: t.status in ("succeeded", "failed", "cancelled"), "the job to end")
    assert t.status == "succeeded", (t.status_reason, _events(pool_settings, tid),
                                     log_path(pool_settings, tid).read_text()[-3000:])
    job = _job(pool_settings, tid)
    record = slurm("scontrol", "show", "job", job.job_id)
    assert "NumNodes=2 " in record and f"UserId={member.pw_name}" in record
    assert job.nodes == "sim[1-2]"
    log = log_path(pool_settings, tid).read_text()
    assert f"Slurm job {job.job_id} on sim1 (task 0 of 2): ranks 0-1 of 4 on cuda:0, cuda:1" in log
    assert f"Slurm job {job.job_id} on sim2 (task 1 of 2): ranks 2-3 of 4 on cuda:0, cuda:1" in log
    # One training: rank 0's progress is the curve; the checkpoints are the gang's, in the one folder.
    assert _steps(pool_settings, tid) == list(range(1, TINY["max_steps"] + 1))
    home = Path(service.get_root(pool_settings, "cluster")) / str(tid)
    def start(name: str) -> dict:
        return next(x for x in map(json.loads, (home / name).read_text().splitlines()) if x["type"] == "start")
    assert "rank 0 <-> cuda:0, rank 1 <-> cuda:1" in start(f"progress-{job.attempt}.jsonl")["note"]
    assert "rank 2 <-> cuda:0, rank 3 <-> cuda:1" in start(f"progress-{job.attempt}.task1.jsonl")["note"]
    assert any(p.name.startswith("step-") for p in (home / "checkpoints").iterdir())


def test_a_members_script_wider_than_a_node_runs_over_two_nodes_as_one_torchrun_world(pool_settings, member) -> None:
    """4 ranks of an unchanged gloo DDP script on a pool of 2-GPU nodes: one launcher per node, the variables
    torchrun --nnodes 2 gives, one world of 4 (DDP's all-reduce needs every rank), one curve, one checkpoint folder."""
    tid = _script(pool_settings, member.pw_name, "wide-script", RESUMABLE_SCRIPT,
                  ["python", "train.py", "--steps", "6"], world_size=4)
    t = _until(pool_settings, tid, lambda t: t.status in ("succeeded", "failed", "cancelled"), "the job to end")
    log = log_path(pool_settings, tid).read_text()
    assert t.status == "succeeded", (t.status_reason, _events(pool_settings, tid), log[-3000:])
    job = _job(pool_settings, tid)
    record = slurm("scontrol", "show", "job", job.job_id)
    assert "NumNodes=2 " in record and f"UserId={member.pw_name}" in record and job.nodes == "sim[1-2]"
    port = 20000 + int(job.job_id) % 10000
    assert f"Slurm job {job.job_id} on sim1 (task 0 of 2): node 0 of 2: ranks 0-1 of 4, meeting at" in log
    assert f"Slurm job {job.job_id} on sim2 (task 1 of 2): node 1 of 2: ranks 2-3 of 4, meeting at" in log
    assert f":{port}, on GPU(s) 0, 1" in log
    assert all(f"[rank {r}] step 6 loss" in log for r in range(4)), log[-3000:]
    home = Path(service.get_root(pool_settings, "cluster")) / str(tid)
    starts = [next(x for x in map(json.loads, (home / name).read_text().splitlines()) if x["type"] == "start")
              for name in (f"progress-{job.attempt}.jsonl", f"progress-{job.attempt}.task1.jsonl")]
    assert [(x["world_size"], x["nnodes"], x["node_rank"], x["first_rank"], x["master_port"]) for x in starts] == [
        (4, 2, 0, 0, port), (4, 2, 1, 2, port)]
    # Rank 0's reports are the curve; its checkpoints are in the one folder both nodes see, the member's files.
    assert _steps(pool_settings, tid) == [1, 2, 3, 4, 5, 6]
    ckpts = sorted((home / "checkpoints").glob("step-*.pt"))
    assert [p.name for p in ckpts] == ["step-000002.pt", "step-000004.pt", "step-000006.pt"]
    assert all(p.stat().st_uid == member.pw_uid for p in ckpts)


def test_a_layout_the_pool_cannot_hold_evenly_is_refused_naming_what_it_can(pool_settings, member) -> None:
    with pytest.raises(service.PoolError, match="ask for 2 or 4 GPUs") as err:
        _submit(pool_settings, member.pw_name, "uneven", TINY, world_size=3)
    assert err.value.field == "world_size"
    with pytest.raises(service.PoolError, match="need 3 nodes of pool 'cluster', and its partition gpu has 2"):
        _submit(pool_settings, member.pw_name, "too-wide", TINY, world_size=6)
    with pytest.raises(service.PoolError, match="ask for 2 or 4 GPUs"):
        _script(pool_settings, member.pw_name, "uneven-script", RESUMABLE_SCRIPT, ["python", "train.py"], world_size=3)
    with session_scope(pool_settings) as sess:
        assert sess.scalar(select(Training.id).where(Training.owner == member.pw_name)) is None


def test_a_training_the_teams_hosts_can_never_hold_goes_to_the_pool_its_request_allows(pool_settings, member) -> None:
    """or_pool: the team's hosts first; the pool only where none of them can ever hold the training."""
    register(pool_settings)  # the team's one host: 2 simulated H100s of 80 GB
    wide = TrainingCreate(name="too-wide", recipe="mlp", config=TINY, world_size=4)
    with write_session(pool_settings) as sess, pytest.raises(FleetCannotHold, match="needs 4 GPUs on one host"):
        placement.create_placed(sess, pool_settings, wide, member.pw_name)
    with write_session(pool_settings) as sess, pytest.raises(service.PoolError, match="no pool named 'nope'") as err:
        placement.create_placed(sess, pool_settings, wide.model_copy(update={"or_pool": "nope"}), member.pw_name)
    assert err.value.field == "or_pool"
    with write_session(pool_settings) as sess, pytest.raises(service.PoolError, match="without pool, host"):
        placement.create_placed(sess, pool_settings, wide.model_copy(update={"or_pool": "cluster", "pool": "cluster"}),
                              member.pw_name)
    with session_scope(pool_settings) as sess:
        assert sess.scalar(select(Training.id).where(Training.owner == member.pw_name)) is None  # nothing written

    # What a host holds stays on the team's hosts; what none can goes to the pool, and says why.
    with write_session(pool_settings) as sess:
        fits = placement.create_placed(sess, pool_settings, wide.model_copy(update={"name": "fits", "world_size": 2,
                                                                                  "or_pool": "cluster"}),
                                     member.pw_name).training.id
        sent = placement.create_placed(sess, pool_settings, wide.model_copy(update={"or_pool": "cluster"}),
                                     member.pw_name).training.id
    assert _row(pool_settings, fits).pool is None and _row(pool_settings, sent).pool == "cluster"
    [first] = _events(pool_settings, sent)
    assert first.startswith("submitted for 4 GPU(s) in Slurm pool cluster (partition gpu), as the request allowed: "
                            "the team's hosts can never hold it (world_size 4 needs 4 GPUs on one host"), first
    # A script whose memory no GPU of the team's has goes there too, and Slurm takes both.
    big = _script(pool_settings, member.pw_name, "too-big", RESUMABLE_SCRIPT, ["python", "train.py"], world_size=1,
                  memory="100GiB", or_pool="cluster")
    assert _row(pool_settings, big).pool == "cluster" and "largest GPU in the fleet has 80" in _events(
        pool_settings, big)[0]
    def submitted(t: Training) -> bool:
        with session_scope(pool_settings) as sess:
            return sess.scalar(select(PoolJob.job_id).where(PoolJob.training_id == t.id)) is not None

    for tid in (sent, big):
        _until(pool_settings, tid, submitted, "the Slurm job")
        with write_session(pool_settings) as sess:
            trainings.cancel(sess, tid, member.pw_name)
    # A pool's GPUs are its own: what its admin declared is what a training there is checked against.
    with write_session(pool_settings) as sess:
        sess.execute(update(Pool).where(Pool.name == "cluster").values(gpu_memory=80 * 2**30))
    with pytest.raises(service.PoolError, match="needs 100.0 GiB per GPU, and pool 'cluster' declares GPUs of 80.0"):
        _script(pool_settings, member.pw_name, "too-big-there", RESUMABLE_SCRIPT, ["python", "train.py"],
                world_size=1, memory="100GiB", pool="cluster")


def test_the_fit_on_a_pool_counts_its_partitions_nodes(pool_settings) -> None:
    with write_session(pool_settings) as sess:
        sess.execute(update(Pool).where(Pool.name == "cluster").values(gpu_memory=80 * 2**30, gpu_model="H100"))
    declared = service.declared_gpus(pool_settings, "cluster")
    assert (declared.gpus_per_node, declared.nodes) == (2, len(NODES))


def test_a_sweep_on_the_pool_runs_its_trials_as_the_members_slurm_jobs_and_a_stop_is_scancel(
        pool_settings, member) -> None:
    from gpufleet.db.sweeps import Sweep
    from gpufleet.sweeps import service as sweeps
    from gpufleet.sweeps.driver import advance_all
    from gpufleet.wire.sweep_requests import SweepCreate

    def sweep(name: str, config: dict, lrs: list[float]) -> uuid.UUID:
        spec = SweepCreate(name=name, recipe="mlp", config=config, space={"lr": lrs}, parallel=2, pool="cluster")
        with write_session(pool_settings) as sess:
            return sweeps.start(sess, pool_settings, spec, member.pw_name).id

    def trials(sid: uuid.UUID) -> list[Training]:
        with session_scope(pool_settings) as sess:
            rows = list(sess.scalars(select(Training).where(Training.sweep_id == sid).order_by(Training.created_at)))
            sess.expunge_all()
            return rows

    def status(sid: uuid.UUID) -> str:
        advance_all(pool_settings, force=True)
        loop.step(pool_settings)
        with session_scope(pool_settings) as sess:
            return sess.get(Sweep, sid).status

    done = sweep("lr-on-slurm", {**TINY, "log_every": 1}, [0.05, 0.01])
    wait_for(lambda: status(done) != "running", 240, "the sweep to end", every=0.5)
    assert status(done) == "succeeded", [t.status_reason for t in trials(done)]
    rows = trials(done)
    assert len(rows) == 2 and {t.pool for t in rows} == {"cluster"} and {t.status for t in rows} == {"succeeded"}
    for t in rows:  # each trial was a Slurm job of the member's own account
        assert f"UserId={member.pw_name}({member.pw_uid})" in slurm("scontrol", "show", "job", _job(pool_settings,
                                                                                                  t.id).job_id)
        assert _steps(pool_settings, t.id)[-1] == TINY["max_steps"]

    # A stop (here the whole sweep's cancel; an early stop cancels one trial the same way) is scancel.
    long = sweep("long-on-slurm", {**TINY, "max_steps": 1000000, "checkpoint_every": 1000000}, [0.05, 0.01])
    wait_for(lambda: status(long) == "running" and len(rows := trials(long)) == 2
             and all(t.status == "running" for t in rows), 240, "both trials to run", every=0.5)
    with write_session(pool_settings) as sess:
        sweeps.cancel(sess, long, member.pw_name)
    sweeps.stop_trials(pool_settings, long, member.pw_name)
    jobs = [_job(pool_settings, t.id).job_id for t in trials(long)]
    wait_for(lambda: loop.step(pool_settings) or {t.status for t in trials(long)} == {"cancelled"}, 120,
             "both trials cancelled")
    assert all("was signalled and stopped" in (t.status_reason or "") for t in trials(long))
    # Slurm ended both jobs (scancel --signal=TERM: the ranks checkpointed and left; a plain scancel after the
    # grace otherwise); nothing of the sweep still runs there.
    states = {slurm("squeue", "-h", "-t", "all", "-j", j, "-o", "%T").strip() for j in jobs}
    assert not states & {"PENDING", "RUNNING", "COMPLETING"}, states
