"""The stop contract between gpufleet and a training's ranks (torch-free).

A stop (``gpufleet trainings cancel``, a worker stopping, a preemption, an
idle reclaim, ``max_runtime``) sends every rank SIGTERM and creates the file
named by ``GPUFLEET_STOP_FILE``; the ranks then have the grace
(``GPUFLEET_STOP_GRACE_S``) to checkpoint and exit before they are killed.

Python's default action for SIGTERM ends a process at once, so a script that
wants its grace calls :func:`watch` once (it records the signal instead) and
asks :func:`stop_requested` between steps::

    gpufleet.watch_stop()
    for step in ...:
        ...
        if gpufleet.stop_requested():
            save_checkpoint(step); break

A script that does not import gpufleet does the same with
``signal.signal(signal.SIGTERM, handler)`` and
``os.path.exists(os.environ["GPUFLEET_STOP_FILE"])``.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

from gpufleet.engine import rankenv
from gpufleet.engine.rankenv import STOP_FILE_ENV

__all__ = ["STOP_FILE_ENV", "mark", "stop_requested", "watch"]


_asked = threading.Event()


def _on_term(signum: int, frame: Any) -> None:
    _asked.set()


def watch() -> None:
    """Record SIGTERM instead of dying of it (main thread only; a no-op elsewhere)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_term)


def stop_requested() -> bool:
    """Whether gpufleet asked this training to stop: the stop file exists, or SIGTERM came."""
    if _asked.is_set():
        return True
    path = rankenv.stop_file()
    return bool(path) and os.path.exists(path)


def mark(path: str | Path) -> None:
    """Create the stop file (idempotent, never raises; never through a link the training's code left there)."""
    from gpufleet.memberfs import mark as create

    create(path)
