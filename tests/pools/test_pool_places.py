"""What a pool runs and ships, whoever runs the API: the pool's own interpreter for a member's script, and
each line of a job's output once in the training's log however many API processes poll Slurm.

A real Slurm cluster (tests/support/slurm.py), the member's real Unix account, and for the log two real API
processes, each running the pools' loop (``gpufleet.jobs.pool_loop.step``) against one PostgreSQL.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from gpufleet.db.session import session_scope, write_session
from gpufleet.jobs import pool_loop as loop
from gpufleet.lifecycle.models import Training
from gpufleet.pools import placement, service
from gpufleet.trainings import code
from gpufleet.trainings.log_store import read_training_log
from gpufleet.users.accounts import add_user
from gpufleet.wire.training_requests import TrainingCreate
from support.fleet import make_settings, wait_for
from support.scripts import tar_of
from support.slurm import PARTITION, slurm_cluster  # noqa: F401 - the fixture
from support.unix import short_name, unix_account

ENDED = ("succeeded", "failed", "cancelled")
COUNTING = '''\
import sys, time
for i in range(int(sys.argv[1])):
    print(f"line {i:04d} of the job", flush=True)
    time.sleep(0.02)
'''


def _pool(settings, python: str | None = None) -> None:
    root = Path(tempfile.mkdtemp(prefix="gpufleet-pool-"))
    root.chmod(0o755)
    with write_session(settings) as sess:
        service.add(sess, settings, service.PoolSpec(name="cluster", options={"partition": PARTITION}, gpus_per_node=2,
                                                     checkpoint_root=str(root), python=python))


def _script(settings, owner: str, source: str, argv: list[str]) -> uuid.UUID:
    with write_session(settings) as sess:
        add_user(sess, owner, "member")
        info, _ = code.store(sess, settings, tar_of([("file", "train.py", source)]), owner)
        req = TrainingCreate(kind="script", name="on-pool", code=info.hash, argv=argv, world_size=1,
                             memory="1GiB", pool="cluster")
        return placement.create_placed(sess, settings, req, owner).training.id


def _row(settings, tid: uuid.UUID) -> Training:
    with session_scope(settings) as sess:
        t = sess.get(Training, tid)
        sess.expunge(t)
        return t


def _log(settings, tid: uuid.UUID) -> str:
    """The training's log as the API serves it (what the hosts shipped to the database)."""
    with session_scope(settings) as sess:
        return read_training_log(sess, settings, tid).text


def test_a_script_on_a_pool_runs_the_pools_own_python(tmp_path, slurm_cluster) -> None:  # noqa: F811
    """``pools add --python``: the cluster's interpreter runs the member's script too, not the API host's."""
    s = make_settings(tmp_path, "sqlite")
    place = Path(tempfile.mkdtemp(prefix="gpufleet-python-"))
    place.chmod(0o755)
    python = place / "cluster-python"
    python.write_text(f'#!/bin/sh\necho "the pool\'s python runs: $*" >&2\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    _pool(s, str(python))
    name = short_name("py")
    with unix_account(name):
        tid = _script(s, name, COUNTING, ["python", "train.py", "3"])

        def ended() -> Training | None:
            loop.step(s)
            t = _row(s, tid)
            return t if t.status in ENDED else None
        t = wait_for(ended, 240, "the script's job to end", every=0.5)
        log = _log(s, tid)
        assert t.status == "succeeded", (t.status_reason, log[-3000:])
        assert "the pool's python runs: train.py 3" in log, log[-3000:]
        assert "line 0002 of the job" in log


def _api_process(settings, until: uuid.UUID, tmp_path: Path, n: int) -> subprocess.Popen:
    """An API process's pools' loop, run back to back until the training has ended."""
    blob = tmp_path / f"settings-{n}.pickle"
    blob.write_bytes(pickle.dumps(settings))
    program = (
        "import pickle, sys, uuid\n"
        "from gpufleet.db.session import session_scope\n"
        "from gpufleet.jobs import pool_loop\n"
        "from gpufleet.lifecycle.models import Training\n"
        "s = pickle.load(open(sys.argv[1], 'rb'))\n"
        "while True:\n"
        "    pool_loop.step(s)\n"
        "    with session_scope(s) as sess:\n"
        "        if sess.get(Training, uuid.UUID(sys.argv[2])).status in ('succeeded', 'failed', 'cancelled'):\n"
        "            break\n")
    return subprocess.Popen([sys.executable, "-c", program, str(blob), str(until)], env=os.environ.copy())


@pytest.mark.postgres
@pytest.mark.redis
def test_two_api_processes_ship_each_line_of_a_pool_jobs_output_once(tmp_path, request, slurm_cluster) -> None:  # noqa: F811
    s = make_settings(tmp_path, "postgresql", request)
    _pool(s)
    name = short_name("lg")
    lines = 150
    with unix_account(name):
        tid = _script(s, name, COUNTING, ["python", "train.py", str(lines)])
        procs = [_api_process(s, tid, tmp_path, n) for n in (1, 2)]
        try:
            for p in procs:
                assert p.wait(timeout=300) == 0
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        t = _row(s, tid)
        log = _log(s, tid)
        assert t.status == "succeeded", (t.status_reason, log[-3000:])
        for i in range(lines):
            assert log.count(f"line {i:04d} of the job\n") == 1, (i, log[-3000:])


def test_pools_add_refuses_a_python_a_member_cannot_run_saying_why(tmp_path, slurm_cluster) -> None:  # noqa: F811
    """Each job runs ``--python`` as its owner: one under a folder only root enters, or one without gpufleet,
    fails every job there (``execve(): Permission denied``, exit code 13), so the pool is refused at once."""
    s = make_settings(tmp_path, "sqlite")
    closed = Path(tempfile.mkdtemp(prefix="gpufleet-closed-"))  # mode 0700, as /root is
    hidden = closed / "python3"
    hidden.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    hidden.chmod(0o755)
    bare = Path(tempfile.mkdtemp(prefix="gpufleet-bare-"))
    bare.chmod(0o755)
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(bare / "venv")], check=True)
    (bare / "venv").chmod(0o755)
    for python, why in ((hidden, "Permission denied"),
                        (bare / "venv" / "bin" / "python", "No module named 'gpufleet'")):
        with pytest.raises(service.PoolError, match=f"run as account nobody: .*{why}") as err:
            _pool(s, str(python))
        assert err.value.field == "python" and err.value.status == 422
        assert "every account can execute" in str(err.value)
        with session_scope(s) as sess:
            assert service.listed(sess) == []
    _pool(s)  # this environment's own interpreter runs for every account
