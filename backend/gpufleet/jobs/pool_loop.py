"""The pools' loop in the API process: submit what waits, then carry Slurm's word back, every few seconds.

It runs only while a pool exists; a pass that fails (slurmctld away, say) is
logged once and tried again: the jobs, the rows and Slurm's own state are the
truth, so nothing is lost while it waits.
"""

from __future__ import annotations

import logging
import threading

from sqlalchemy import select

from gpufleet.config import Settings
from gpufleet.db.pools import Pool
from gpufleet.db.session import session_scope
from gpufleet.jobs import ckpt_pools
from gpufleet.jobs import pool_watch as watch
from gpufleet.pools import submit

log = logging.getLogger(__name__)

EVERY_S = 2.0


def step(settings: Settings) -> None:
    """One pass: submit the waiting pool trainings, then poll the live jobs."""
    with session_scope(settings) as sess:
        if sess.scalar(select(Pool.id).limit(1)) is None:
            return
    ckpt_pools.restore_waiting(settings, settings)  # the store's newest checkpoint, before the job is sent
    submit.submit_waiting(settings)
    watch.poll(settings)


def start(settings: Settings, stop: threading.Event) -> threading.Thread:
    def run() -> None:
        failing = False
        while not stop.is_set():
            try:
                step(settings)
                if failing:
                    log.warning("the pools' loop works again")
                failing = False
            except Exception:  # Slurm or the database may be away; say so once
                if not failing:
                    log.warning("the pools' loop failed; trying again", exc_info=True)
                failing = True
            stop.wait(EVERY_S)

    thread = threading.Thread(target=run, name="gpufleet-pools", daemon=True)
    thread.start()
    return thread
