"""A pool job that failed says why in its training's reason, from the end of its own output: the scheduler's
"execve(): …: Permission denied" or the script's last traceback line, where the reason said "exit code 13"
alone. The output is in the member's folder, so it is read as its log is: through no link."""

from __future__ import annotations

import os

from gpufleet.db.models import Pool, PoolJob
from gpufleet.jobs.pool_watch import output_tail


def _job(root, text: bytes, name: str = "slurm-1.out") -> tuple[PoolJob, Pool]:
    folder = root / "t1"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(text)
    return PoolJob(output=str(folder / name), output_offset=len(text)), Pool(checkpoint_root=str(root))


def test_the_line_that_names_the_error_is_told_not_the_last_one(tmp_path):
    job, pool = _job(tmp_path, b"[gpufleet] Slurm job 7 on node1: ranks on GPU(s) 0\n"
                               b"slurmstepd: error: execve(): /root/venv/bin/python3: Permission denied\n"
                               b"srun: error: node1: task 0: Exited with exit code 13\n\n")
    assert output_tail(job, pool) == "slurmstepd: error: execve(): /root/venv/bin/python3: Permission denied"
    job, pool = _job(tmp_path, b"step 1\nTraceback (most recent call last):\n  File \"train.py\", line 3\n"
                               b"ZeroDivisionError: division by zero\ncleaning up\n", "slurm-2.out")
    assert output_tail(job, pool) == "ZeroDivisionError: division by zero"
    job, pool = _job(tmp_path, b"step 1\nstep 2\n", "slurm-3.out")
    assert output_tail(job, pool) == "step 2"


def test_an_output_behind_a_link_or_missing_is_not_read(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("root:$6$hash: error in the shadow\n")
    job, pool = _job(tmp_path / "pool", b"x\n")
    os.unlink(job.output)
    os.symlink(secret, job.output)
    job.output_offset = 100
    assert output_tail(job, pool) is None
    os.unlink(job.output)
    assert output_tail(job, pool) is None
