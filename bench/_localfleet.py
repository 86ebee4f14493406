"""One host's fleet for a bench, in this process: a worker without its agent, the scheduler's loop, and a
heartbeat that keeps the host online (the agent's part). Shared by bench/sweep.py and bench/share.py."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import update

from gpufleet.config import Settings
from gpufleet.db.models import Host
from gpufleet.db.session import write_session
from gpufleet.db.types import utcnow
from gpufleet.jobs.embedded import settings_env, worker_command
from gpufleet.jobs.scheduler_loop import start as start_loop


@contextmanager
def local_fleet(s: Settings, data: Path, concurrency: int) -> Iterator[None]:
    """Run the worker (its log in ``data/worker.log``) and the loop while the block runs; stop both after."""
    with open(data / "worker.log", "ab") as log:
        worker = subprocess.Popen(worker_command(s.host_name, agent=False) + ["--concurrency", str(concurrency)],
                                  env=settings_env(s), stdout=log, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL)
    stop = threading.Event()
    loop = start_loop(s, stop)

    def beat() -> None:  # the worker runs without its agent: keep the host online
        while not stop.wait(5):
            try:
                with write_session(s) as sess:
                    sess.execute(update(Host).where(Host.name == s.host_name).values(last_heartbeat=utcnow()))
            except Exception:  # noqa: BLE001 - a busy database: the next beat comes in 5 s
                pass

    threading.Thread(target=beat, daemon=True).start()
    try:
        yield
    finally:
        stop.set()
        loop.join(30)
        worker.kill()
        worker.wait()
