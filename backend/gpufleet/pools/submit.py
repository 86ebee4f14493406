"""A queued pool training becomes one Slurm job, submitted as its owner.

Each attempt gets a folder under the pool's checkpoint root (a path both this
host and the nodes see), owned by the member's account: the launch spec, the
batch script, the job's output, the ranks' progress lines and the checkpoints.
The job runs ``srun`` over :mod:`gpufleet.pools.node`, which takes the GPUs
Slurm granted and starts gpufleet's own launcher, as on a team host.
"""

from __future__ import annotations

import logging
import math
import os
import shlex
import uuid
from pathlib import Path

from sqlalchemy import select, update

from gpufleet.config import Settings
from gpufleet.db.pools import Pool, PoolJob
from gpufleet.db.session import session_scope, write_session
from gpufleet.lifecycle.models import Training
from gpufleet.lifecycle.transitions import record_event, transition
from gpufleet.pools import slurm
from gpufleet.pools.service import PoolError, member_account
from gpufleet.scheduling.quotas import over_quota
from gpufleet.training.spec import LaunchSpec
from gpufleet.users.runas import RunAccount

log = logging.getLogger(__name__)

JOB_NAME = "gpufleet-{tid}"


def training_dir(pool: Pool, training_id: uuid.UUID | str) -> Path:
    return Path(pool.checkpoint_root) / str(training_id)


def progress_file(pool: Pool, training_id: uuid.UUID | str, attempt: int) -> Path:
    return training_dir(pool, training_id) / f"progress-{attempt}.jsonl"


def _own(path: Path, acct: RunAccount) -> None:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        os.chown(path, acct.uid, acct.gid)
    os.chmod(path, 0o755)


def _give(path: Path, acct: RunAccount, mode: int = 0o644) -> None:
    os.chmod(path, mode)
    if os.geteuid() == 0:
        os.chown(path, acct.uid, acct.gid)


def sbatch_args(settings: Settings, pool: Pool, t: Training, output: Path) -> list[str]:
    """What the job asks Slurm for: one node, the training's GPUs, its time limit and the stop signal."""
    grace = max(1, int(settings.stop_grace_s))
    args = [f"--job-name={JOB_NAME.format(tid=t.id)}", f"--partition={pool.partition}", "--nodes=1",
            "--ntasks-per-node=1", f"--gres=gpu:{t.world_size}", f"--output={output}", "--export=NONE",
            # Slurm's stop contract as gpufleet's: SIGTERM (checkpoint and stop) before the time limit's kill.
            f"--signal=TERM@{grace}"]
    if pool.account:
        args.append(f"--account={pool.account}")
    if t.max_runtime_s:
        args.append(f"--time={math.ceil(t.max_runtime_s / 60)}")
    return args


def _script(pool: Pool, spec: Path) -> str:
    node = f"{shlex.quote(pool.python)} -m gpufleet.pools.node {shlex.quote(str(spec))}"
    return ("#!/bin/sh\n"
            "# One task per node; gpufleet's launcher starts one rank per GPU Slurm granted.\n"
            "export SLURM_EXPORT_ENV=ALL PYTHONUNBUFFERED=1\n"
            f"exec srun --kill-on-bad-exit=1 {node}\n")


def _spec(settings: Settings, pool: Pool, t: Training, attempt: int) -> LaunchSpec:
    home = training_dir(pool, t.id)
    return LaunchSpec(
        recipe=t.recipe, config=dict(t.config), devices=[f"cuda:{i}" for i in range(t.world_size)],
        checkpoint_dir=str(home / "checkpoints"), progress_file=str(progress_file(pool, t.id, attempt)),
        data_root=str(settings.data_root), resume=True, collective_timeout_s=settings.collective_timeout_s,
        training_id=str(t.id), stop_grace_s=settings.stop_grace_s, attempt=attempt)


def submit_one(settings: Settings, t: Training, pool: Pool, acct: RunAccount) -> PoolJob:
    """Write the attempt's files and ``sbatch`` them as the member; the job's row (not added)."""
    attempt = t.attempt + 1
    home = training_dir(pool, t.id)
    _own(home, acct)
    _own(home / "checkpoints", acct)
    spec_path = home / f"spec-{attempt}.json"
    _give(_spec(settings, pool, t, attempt).write(spec_path), acct)
    script = home / f"job-{attempt}.sh"
    script.write_text(_script(pool, spec_path))
    _give(script, acct, 0o755)
    output = home / f"slurm-{attempt}.out"
    job_id = slurm.submit(str(script), acct.name, sbatch_args(settings, pool, t, output), str(home))
    return PoolJob(training_id=t.id, pool_id=pool.id, attempt=attempt, job_id=job_id, account=acct.name,
                   state="PENDING", output=str(output), output_offset=0)


def waiting(settings: Settings) -> list[uuid.UUID]:
    """Queued pool trainings whose current attempt has no live job."""
    with session_scope(settings) as sess:
        live = select(PoolJob.id).where(PoolJob.training_id == Training.id, PoolJob.attempt == Training.attempt,
                                        PoolJob.ended_at.is_(None))
        return list(sess.scalars(select(Training.id).where(
            Training.pool.is_not(None), Training.status == "queued", ~live.exists())
            .order_by(Training.priority.desc(), Training.created_at)))


def submit_waiting(settings: Settings) -> int:
    """Submit every waiting pool training; returns how many were sent."""
    sent = 0
    for tid in waiting(settings):
        with write_session(settings) as sess:
            t = sess.scalar(select(Training).where(Training.id == tid, Training.status == "queued")
                            .with_for_update())
            if t is None or sess.scalar(select(PoolJob.id).where(
                    PoolJob.training_id == t.id, PoolJob.attempt == t.attempt, PoolJob.ended_at.is_(None))):
                continue  # cancelled meanwhile, or another API process sent it
            if (why := over_quota(sess, t)) is not None:
                # Past its owner's quota: it stays queued, saying why, and is sent once GPUs are given back.
                # (No borrowing: gpufleet cannot take back what Slurm runs.)
                if t.wait_reason != why:
                    t.wait_reason = why
                continue
            pool = sess.scalar(select(Pool).where(Pool.name == t.pool))
            try:
                if pool is None:
                    raise PoolError(f"pool {t.pool!r} was removed")
                job = submit_one(settings, t, pool, member_account(sess, settings, t.owner))
            except (PoolError, slurm.SlurmError, OSError) as exc:
                transition(sess, t.id, ["queued"], "failed", reason=f"could not submit to Slurm pool {t.pool}: {exc}",
                           kind="error")
                continue
            sess.add(job)
            sess.execute(update(Training).where(Training.id == t.id)
                         .values(attempt=job.attempt, lease_owner=f"slurm:{job.job_id}",
                                 wait_reason=f"submitted to Slurm as job {job.job_id} (account {job.account})")
                         .execution_options(synchronize_session=False))
            record_event(sess, t.id, "info", status="queued",
                         reason=f"attempt {job.attempt}: submitted to Slurm pool {pool.name} as job {job.job_id}, "
                                f"as Unix account {job.account}",
                         data={"pool": pool.name, "job_id": job.job_id, "account": job.account})
            sent += 1
    return sent
