"""Checkpoints on the store for a pool's trainings, from the pools' loop (the API process): before a waiting
training is submitted, the store's newest complete checkpoint is brought into its folder below the pool's
root when that folder has nothing newer (a training that ran on the team's hosts, or in another pool), given
to the member the job runs as; and each checkpoint its job reports is queued for upload as a host's are.
Below the pool's root every name is reached through no link (gpufleet.memberfs): the training's folder
there is the member's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import select

from gpufleet.config import CodeSettings, StoreSettings
from gpufleet.db.pools import Pool
from gpufleet.db.session import session_scope
from gpufleet.jobs import ckpt_restore, ckpt_uploads
from gpufleet.lifecycle.models import Training
from gpufleet.pools import submit
from gpufleet.pools.attempt import training_dir
from gpufleet.pools.errors import PoolError
from gpufleet.pools.service import member_account


def checkpoints_of(pool: Pool, t: Training) -> Path:
    return training_dir(pool, t.id) / "checkpoints"


def restore_waiting(store_settings: StoreSettings, code_settings: CodeSettings) -> None:
    """Bring the store's newest checkpoint to each waiting pool training whose folder is behind it."""
    if ckpt_uploads.current() is None:
        return
    for tid in submit.waiting(store_settings):
        with session_scope(store_settings) as sess:
            t = sess.get(Training, tid)
            pool = sess.scalar(select(Pool).where(Pool.name == t.pool)) if t is not None else None
            if t is None or pool is None:
                continue
            try:
                acct = member_account(sess, code_settings, t.owner)
            except PoolError:
                continue  # its submission says why
            sess.expunge(t)
            sess.expunge(pool)
        ckpt_restore.restore(store_settings, t, checkpoints_of(pool, t), None, root=Path(pool.checkpoint_root),
                             owner=(acct.uid, acct.gid))


def on_checkpoint(pool: Pool, t: Training, attempt: int, label: str) -> Any:
    """The pool job's metrics sink's hook: its checkpoints queued for upload (None with no store set)."""
    return ckpt_uploads.on_checkpoint(t.id, checkpoints_of(pool, t), attempt, f"{label} pool {pool.name}",
                                      root=Path(pool.checkpoint_root))
