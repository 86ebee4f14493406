"""A member with a shell against the pools' loop, which runs as root: links in her pool folder, and swaps of
a folder or file for a link while the loop works there, point at a root-only canary (tests/support/links.py).
The canary is never read into her training's log, and never changed in content, mode or owner.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlalchemy import select

from gpufleet.db.pools import Pool
from gpufleet.db.session import session_scope, write_session
from gpufleet.jobs import pool_watch as watch
from gpufleet.jobs.logs import log_path
from gpufleet.pools import service, submit
from gpufleet.trainings import service as trainings
from support.links import canary_file, plant, swapping
from support.slurm import slurm, slurm_cluster  # noqa: F401 - the fixture
from pools.test_slurm_pool import TINY, _job, _row, _submit, _until, member, pool_settings  # noqa: F401

RACE_S = 2.0
LONG = {**TINY, "max_steps": 1000000, "checkpoint_every": 1000000}


@pytest.fixture
def canary(tmp_path: Path):
    with canary_file(tmp_path / "root-only") as c:
        yield c


@pytest.fixture
def submitted(pool_settings, member):  # noqa: F811
    """A long training of the member's, sent to the pool (its folder made, its job in Slurm)."""
    tid = _submit(pool_settings, member.pw_name, "linked", LONG)
    _until(pool_settings, tid, lambda t: t.attempt >= 1, "the training to be submitted")
    yield tid
    with write_session(pool_settings) as sess:
        trainings.cancel(sess, tid, member.pw_name)
    slurm("scancel", "--user", member.pw_name)


def _log(settings, tid) -> str:
    path = log_path(settings, tid)
    return path.read_text(errors="replace") if path.exists() else ""


def test_a_link_at_the_pools_output_file_reads_no_canary(pool_settings, member, canary, submitted) -> None:  # noqa: F811
    out = Path(_job(pool_settings, submitted).output)
    plant(member, out, canary.path)
    for _ in range(3):
        watch.poll(pool_settings)
    canary.assert_not_in(_log(pool_settings, submitted), "the training's log through a planted link")
    # The same name flipping between a file of hers and the link while the loop reads it.
    with swapping(member, out, canary.path, folder=False):
        deadline = time.monotonic() + RACE_S
        while time.monotonic() < deadline:
            watch.poll(pool_settings)
    canary.assert_not_in(_log(pool_settings, submitted), "the training's log through a swapped link")
    canary.assert_untouched()


def _resubmit_racing(settings, tid, member, at: Path, target: Path) -> int:  # noqa: F811
    """The server writes the next attempt's files (folders, spec, batch script) again and again while ``at``
    flips between a folder of hers and a link; how many tries."""
    t, (pool, acct) = _row(settings, tid), _pool_and_account(settings, member)
    tries = 0
    with swapping(member, at, target, folder=True):
        deadline = time.monotonic() + RACE_S
        while time.monotonic() < deadline:
            tries += 1
            try:
                submit.write_attempt(settings, t, pool, acct)  # what submit_one writes before its sbatch
            except (OSError, service.PoolError):
                pass  # refused: a link where a folder of hers should be
    return tries


@pytest.mark.parametrize("name", ["checkpoints", "spec-2.json"])
def test_a_folder_swapped_for_a_link_while_the_pool_folder_is_made_changes_no_canary(
        pool_settings, member, canary, submitted, name) -> None:  # noqa: F811
    home = Path(service.get_root(pool_settings, "cluster")) / str(submitted)
    planted = home / name
    plant(member, planted, canary.path)
    try:
        submit.submit_one(pool_settings, _row(pool_settings, submitted), *_pool_and_account(pool_settings, member))
    except (OSError, service.PoolError):
        pass
    canary.assert_untouched()
    assert _resubmit_racing(pool_settings, submitted, member, planted, canary.path) > 0
    canary.assert_untouched()


def _pool_and_account(settings, member):  # noqa: F811
    with session_scope(settings) as sess:
        pool = sess.scalar(select(Pool).where(Pool.name == "cluster"))
        sess.expunge(pool)
        return pool, service.member_account(sess, settings, member.pw_name)
