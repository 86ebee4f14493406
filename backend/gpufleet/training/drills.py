"""Drills: environment switches that make a training fail or pause on purpose.

Unset in normal runs. Tests use them to hold a training at a known step or make
one rank fail, whatever the machine's speed; an operator can use them to check
that a deployment stops a whole job when one rank dies.
"""

from __future__ import annotations

import os
import time

import torch


class InjectedFault(RuntimeError):
    """Raised by the GPUFLEET_TRAIN_FAULT drill (see :func:`fault_at`)."""


def fault_at() -> tuple[int, int, str] | None:
    """``GPUFLEET_TRAIN_FAULT=RANK:STEP[:KIND]`` makes that rank fail at that
    step (KIND: error, oom, exit, hang). A drill for tests and for checking that a
    deployment stops a whole job when one rank dies; unset in normal runs."""
    raw = os.environ.get("GPUFLEET_TRAIN_FAULT")
    if not raw:
        return None
    parts = raw.split(":")
    return int(parts[0]), int(parts[1]), parts[2] if len(parts) > 2 else "error"


def hold_at() -> tuple[int, str] | None:
    """``GPUFLEET_TRAIN_HOLD=STEP:PATH`` makes every rank wait after step STEP until PATH
    exists or a stop is asked for: a drill that keeps a training running at a known
    step (tests of preemption and stops, whatever the machine's speed)."""
    raw = os.environ.get("GPUFLEET_TRAIN_HOLD")
    if not raw:
        return None
    step, _, path = raw.partition(":")
    return int(step), path


def raise_fault(kind: str, rank: int, step: int) -> None:
    if kind == "hang":  # a stuck rank: its peers must time out, not wait forever
        while True:
            time.sleep(3600)
    if kind == "exit":
        os._exit(3)  # a crash: no exception, no clean-up
    if kind == "oom":
        raise torch.OutOfMemoryError(f"injected out of memory on rank {rank} at step {step}")
    raise InjectedFault(f"injected failure on rank {rank} at step {step}")
