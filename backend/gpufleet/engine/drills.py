"""Drills: environment switches that make a training fail, pause or run slow on purpose.

Unset in normal runs. Tests use them to hold a training at a known step, make
one rank fail or one rank slow, whatever the machine's speed; an operator can
use them to check that a deployment stops a whole job when one rank dies.

Each is a step hook (:class:`gpufleet.engine.trainer.StepHook`) that the
launcher installs in a rank's Trainer when the rank's environment asks for it
(:func:`from_environment`); the Trainer's loop knows nothing of them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpufleet.engine import compat, rankenv
from gpufleet.engine.rankenv import SPEED_ENV

__all__ = ["SPEED_ENV", "Fault", "Hold", "InjectedFault", "SlowRank", "from_environment", "slow_rank_hook"]


class InjectedFault(RuntimeError):
    """Raised by the GPUFLEET_TRAIN_FAULT drill (see :func:`fault_at`)."""


def fault_at() -> tuple[int, int, str] | None:
    """``GPUFLEET_TRAIN_FAULT=RANK:STEP[:KIND]`` makes that rank fail at that
    step (KIND: error, oom, exit, hang). A drill for tests and for checking that a
    deployment stops a whole job when one rank dies; unset in normal runs."""
    raw = rankenv.drill(rankenv.FAULT_ENV)
    if not raw:
        return None
    parts = raw.split(":")
    return int(parts[0]), int(parts[1]), parts[2] if len(parts) > 2 else "error"


def hold_at() -> tuple[int, str] | None:
    """``GPUFLEET_TRAIN_HOLD=STEP:PATH`` makes every rank wait after step STEP until PATH
    exists or a stop is asked for: a drill that keeps a training running at a known
    step (tests of preemption and stops, whatever the machine's speed)."""
    raw = rankenv.drill(rankenv.HOLD_ENV)
    if not raw:
        return None
    step, _, path = raw.partition(":")
    return int(step), path


def slow_rank_hook(rank: int) -> Callable[[float], None] | None:
    """``GPUFLEET_TEST_RANK_SPEED=1:0.5`` runs rank 1 at half speed.

    The returned callback sleeps after each local step so the rank takes
    ``1/speed`` times as long as its computation did; None for other ranks.
    """
    for part in filter(None, (rankenv.drill(SPEED_ENV) or "").split(",")):
        r, _, speed = part.partition(":")
        if int(r) == rank:
            factor = 1.0 / float(speed) - 1.0
            if factor < 0:
                raise ValueError(f"{SPEED_ENV}: a speed must be in (0, 1], got {speed}")
            return lambda seconds: time.sleep(seconds * factor)
    return None


def raise_fault(kind: str, rank: int, step: int) -> None:
    if kind == "hang":  # a stuck rank: its peers must time out, not wait forever
        while True:
            time.sleep(3600)
    if kind == "exit":
        os._exit(3)  # a crash: no exception, no clean-up
    if kind == "oom":
        raise compat.out_of_memory_error()(f"injected out of memory on rank {rank} at step {step}")
    raise InjectedFault(f"injected failure on rank {rank} at step {step}")


@dataclass
class Fault:
    """Rank ``rank`` fails as ``kind`` before step ``step``."""

    rank: int
    step: int
    kind: str

    def before_step(self, trainer: Any) -> None:
        if trainer.rank == self.rank and trainer.step == self.step:
            raise_fault(self.kind, trainer.rank, trainer.step)

    def after_compute(self, trainer: Any, seconds: float) -> None:
        pass


@dataclass
class Hold:
    """Every rank waits before step ``step`` until ``path`` exists or a stop is asked for.

    A training resumed at that very step waited there already (a stop at the hold checkpoints at it), so its
    next attempt goes on, as one that resumed past it does."""

    step: int
    path: str
    start: int | None = None  # the step this process began at

    def before_step(self, trainer: Any) -> None:
        if self.start is None:
            self.start = trainer.step
        if trainer.step == self.step and not 0 < self.start == self.step:
            while not os.path.exists(self.path) and not trainer.should_stop():
                time.sleep(0.05)

    def after_compute(self, trainer: Any, seconds: float) -> None:
        pass


@dataclass
class SlowRank:
    """This rank sleeps after each step, so that it takes ``1/speed`` times as long."""

    sleep: Callable[[float], None]

    def before_step(self, trainer: Any) -> None:
        pass

    def after_compute(self, trainer: Any, seconds: float) -> None:
        self.sleep(seconds)  # it finishes its part later, as a slower GPU would


def from_environment(rank: int) -> list[Any]:
    """The drills this rank's environment asks for, in the order they act: fault, hold, speed."""
    hooks: list[Any] = []
    if fault := fault_at():
        hooks.append(Fault(*fault))
    if hold := hold_at():
        hooks.append(Hold(*hold))
    if sleep := slow_rank_hook(rank):
        hooks.append(SlowRank(sleep))
    return hooks
