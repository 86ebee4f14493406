"""The rank server: multiprocessing's forkserver, started by a launcher and preloaded with torch,
the trainer and every installed recipe (``engine/rankpreload.py``), that the launcher's ranks are
forked from. One import of torch serves every rank, where each spawned rank imports it again.

A warm launcher (``engine/warm.py``) starts its server before its training is known, a cold one
(``engine/launch.py``) when it has more than one rank to start. The server dies with the launcher
that started it (``PR_SET_PDEATHSIG``), and its ranks die with it.
"""

from __future__ import annotations

import os
import sys

# The pid of the launcher starting a rank server, for the server to check it is still its child.
SERVER_PARENT_ENV = "GPUFLEET_RANK_SERVER_PARENT"


def nothing() -> None:
    """What the rank server's first fork runs: it shows the server has finished its imports."""


def start() -> None:
    """Start multiprocessing's forkserver with the rank preload and wait for its first fork."""
    import multiprocessing

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["gpufleet.engine.rankpreload"])
    probe = ctx.Process(target=nothing, name="gpufleet-rank-server-probe")
    # The server dies with this process; it checks it is still this process's child once tied to it.
    os.environ[SERVER_PARENT_ENV] = str(os.getpid())
    try:
        probe.start()  # starts the server, whose imports this fork waits for
    finally:
        del os.environ[SERVER_PARENT_ENV]
    probe.join()
    if probe.exitcode != 0:
        raise RuntimeError(f"the rank server's first fork exited with {probe.exitcode}")


def try_start() -> str | None:
    """:func:`start`, or why the server could not start (the ranks are then spawned, each importing torch)."""
    try:
        start()
    except Exception as exc:  # noqa: BLE001 - ranks start as spawned processes instead
        return f"{type(exc).__name__}: {exc}"
    return None


def start_or_say(who: str) -> bool:
    """:func:`start`; if it cannot, say why on stderr (as ``who``) and return False: ranks are spawned."""
    why = try_start()
    if why is not None:
        print(f"{who}: no rank server ({why}); ranks are spawned", file=sys.stderr, flush=True)
    return why is None
