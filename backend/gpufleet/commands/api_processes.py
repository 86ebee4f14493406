"""`gpufleet serve --workers N`: N API processes on one address, each with its own interpreter lock.

The parent binds the address (and the local accounts' socket), prepares the
database, then forks N processes that each serve on those same sockets (the
kernel hands every new connection to one of them) with the whole app: routes,
the live stream, admission and the scheduler loop. What they must agree on
lives outside them: the trainings in PostgreSQL, the rate limits and the live
GPU samples in Redis, the scheduler's leadership in a PostgreSQL advisory lock
(one loop works the queue; the others wait to take over). So several processes
need PostgreSQL and Redis: :func:`refusal` says so before anything starts.

The parent only watches: a process that dies is started again; SIGTERM or
Ctrl-C reaches every process, which closes its connections and exits.
"""

from __future__ import annotations

import os
import signal
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from gpufleet.config import Settings

# A process that dies sooner than this after its start is not restarted at once, so a
# process that cannot start (a broken setting) does not spin.
RESTART_PAUSE_S = 2.0


def refusal(settings: Settings, workers: int) -> str | None:
    """Why ``workers`` API processes cannot run with ``settings``, or None."""
    if workers <= 1:
        return None
    missing = [what for what, ok in (("PostgreSQL (GPUFLEET_DATABASE_URL)", not settings.is_sqlite),
                                     ("Redis (GPUFLEET_REDIS_URL)", bool(settings.redis_url))) if not ok]
    if missing:
        return (f"--workers {workers} needs {' and '.join(missing)}: several API processes share the queue, the "
                "rate limits and the live stream through them; without them run one process (--workers 1)")
    return None


def run_processes(settings: Settings, workers: int, serve_one: Callable[[int], None], console: Console) -> None:
    """Fork ``workers`` processes running ``serve_one(i)``; restart one that dies; stop all on a signal."""
    from gpufleet.db.session import engine_for, get_engine

    # No connection crosses a fork: every process opens its own.
    engine_for(settings).dispose()
    get_engine.cache_clear()
    children: dict[int, tuple[int, float]] = {}
    stopping: list[int] = []

    def start(i: int) -> None:
        pid = os.fork()
        if pid == 0:
            _child(i, serve_one)
        children[pid] = (i, time.monotonic())

    def forward(sig: int, _frame: object) -> None:
        if not stopping:
            console.print("stopping: closing every API process's connections…", highlight=False)
        stopping.append(sig)
        for pid in list(children):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    for i in range(workers):
        start(i)
    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    console.print(f"{workers} API processes: {', '.join(str(p) for p in children)}", highlight=False)
    while children:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        i, started = children.pop(pid, (None, 0.0))
        if i is None or stopping:
            continue
        console.print(f"API process {i} (pid {pid}) ended ({_how(status)}); starting another", highlight=False)
        time.sleep(max(0.0, started + RESTART_PAUSE_S - time.monotonic()))
        if not stopping:
            start(i)


def _child(i: int, serve_one: Callable[[int], None]) -> None:
    code = 0
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        serve_one(i)
    except BaseException:  # noqa: BLE001 - a forked process must never return into the parent's code
        traceback.print_exc()
        code = 1
    finally:
        os._exit(code)


def _how(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit code {os.waitstatus_to_exitcode(status)}"
