"""What a rank process reads from its environment, in one place.

A rank is started by a launcher (``engine/launch.py``, ``mp.spawn``), by
``torchrun``, or is a user's own script; it never has the server's
:class:`~gpufleet.config.Settings` (their secrets are kept out of a training's
environment: ``trainings/environment.py``). What it needs to know comes in the
variables its starter set, and this module is where training code reads them.
The server side reads its settings in ``config.py`` (and the sources it uses).

The one exception is ``rankpath/gpufleet_report.py``, which runs in a user's
interpreter with the standard library only and reads ``GPUFLEET_REPORT_FILE``
and ``RANK`` itself.
"""

from __future__ import annotations

import os

# Set by the launcher in each rank it spawns: the rank's parent is the launcher (engine/startup.py).
RANK_SPAWNED_ENV = "GPUFLEET_RANK_SPAWNED"
# Set by a warm launcher (engine/warm.py) when it is handed its training: the time (Unix seconds)
# its launch began, which its process start is not (it waited in the pool before).
LAUNCH_BEGAN_ENV = "GPUFLEET_LAUNCH_BEGAN"
# The file whose existence asks a training to checkpoint and stop (engine/stopfile.py).
STOP_FILE_ENV = "GPUFLEET_STOP_FILE"
# Drills (engine/drills.py): make a rank fail, every rank pause, or a rank slow, on purpose.
FAULT_ENV = "GPUFLEET_TRAIN_FAULT"
HOLD_ENV = "GPUFLEET_TRAIN_HOLD"
SPEED_ENV = "GPUFLEET_TEST_RANK_SPEED"


def local_rank() -> int:
    """This process's rank on its host (torchrun's ``LOCAL_RANK``), 0 when unset."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def has_torchrun_world() -> bool:
    """Whether torchrun's ``RANK`` and ``WORLD_SIZE`` describe a process group to join."""
    return "WORLD_SIZE" in os.environ and "RANK" in os.environ


def spawned_by_launcher() -> bool:
    return os.environ.get(RANK_SPAWNED_ENV) == "1"


def launch_began() -> float | None:
    """When the launch began, for a rank forked from a rank server (a warm launcher: when it was handed the
    training; a cold one: its own start), in Unix seconds; None for a spawned rank."""
    try:
        return float(os.environ[LAUNCH_BEGAN_ENV])
    except (KeyError, ValueError):
        return None


def stop_file() -> str | None:
    return os.environ.get(STOP_FILE_ENV) or None


def visible_devices(names: tuple[str, ...]) -> dict[str, str]:
    """The device-visibility variables among ``names`` that this process has, with their values."""
    return {k: os.environ[k] for k in names if k in os.environ}


def share_mb() -> int | None:
    """The share of its GPU's memory this rank was given (MB), None for a whole GPU."""
    from gpufleet.rankpath.gpufleet_share import share_of

    return share_of(os.environ)


def drill(name: str) -> str | None:
    """The raw value of a drill variable (``FAULT_ENV``, ``HOLD_ENV``, ``SPEED_ENV``), None when unset."""
    return os.environ.get(name) or None
