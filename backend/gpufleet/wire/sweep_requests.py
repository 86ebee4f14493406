"""A sweep as the API, the client and the CLI send it (a sweep file is this, in YAML).

One template (a recipe and its config, or a script and its arguments), a
search space over the template's fields, how to search it, and what to
compare. Everything pydantic can check is checked here; what needs the
recipe (are the names config fields, are the values in bounds) is checked by
:mod:`gpufleet.sweeps.service` before anything is written.
"""

from __future__ import annotations

import itertools
import math
import re
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from gpufleet.bounds import JSON_INT_MAX, MAX_MEMORY_MB, MAX_PRIORITY, RequestBody

MAX_TRIALS = 10_000
PARAM_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
# A range's ends: past any learning rate, width or step count a recipe takes, and finite
# (the recipe's own bounds are checked by the service; NaN and infinity never reach it).
MAX_SPACE = 1e15
Number = Annotated[float, Field(ge=-MAX_SPACE, le=MAX_SPACE)] | Annotated[int, Field(ge=-JSON_INT_MAX, le=JSON_INT_MAX)]


class SpaceRange(RequestBody):
    """Numbers from ``low`` to ``high``: any of them (random, TPE), or ``count`` points / every ``step`` (grid)."""

    low: Number
    high: Number
    log: bool = Field(default=False, description="spaced on a log scale (low must be above 0)")
    step: Number | None = Field(default=None, gt=0, description="grid points every step from low")
    count: int | None = Field(default=None, ge=2, le=1000, description="grid: this many points from low to high")

    @model_validator(mode="after")
    def _sane(self) -> SpaceRange:
        if not self.low < self.high:
            raise ValueError(f"low ({self.low}) must be below high ({self.high})")
        if self.log and self.low <= 0:
            raise ValueError("a log range needs low above 0")
        if self.step is not None and self.count is not None:
            raise ValueError("give step or count, not both")
        if self.step is not None and self.log:
            raise ValueError("a log range is gridded by count, not step")
        if self.step is not None and (self.high - self.low) / self.step >= 1000:
            raise ValueError(f"step {self.step} makes more than 1000 points from {self.low} to {self.high}")
        return self

    @property
    def integer(self) -> bool:
        return all(isinstance(v, int) for v in (self.low, self.high, self.step or 1))

    def grid(self) -> list[Any] | None:
        """The grid points, or None when neither step nor count is given."""
        if self.step is not None:
            n = int(math.floor((self.high - self.low) / self.step + 1e-9)) + 1
            pts = [self.low + i * self.step for i in range(n)]
        elif self.count is not None:
            if self.log:
                lo, hi = math.log(self.low), math.log(self.high)
                pts = [math.exp(lo + (hi - lo) * i / (self.count - 1)) for i in range(self.count)]
            else:
                pts = [self.low + (self.high - self.low) * i / (self.count - 1) for i in range(self.count)]
        else:
            return None
        if self.integer:
            return sorted({int(round(p)) for p in pts})
        return [float(f"{p:.6g}") for p in pts]


SpaceEntry = Annotated[list[Any], Field(min_length=1, max_length=1000)] | SpaceRange


class ScriptTemplate(RequestBody):
    """A script trial: the uploaded code (its hash), and its command with ``{name}`` where a parameter goes."""

    code: str = Field(min_length=64, max_length=64, pattern="^[0-9a-f]{64}$")
    argv: list[Annotated[str, Field(max_length=4096)]] = Field(min_length=1, max_length=1000)
    env: dict[Annotated[str, Field(max_length=128)], Annotated[str, Field(max_length=4096)]] | None = None
    memory: Annotated[str, Field(max_length=32)] | Annotated[int, Field(ge=1, le=2**50)] | None = None
    python: str | None = Field(default=None, max_length=64)
    requirements: str | None = Field(default=None, max_length=1024)


class Asha(RequestBody):
    """Early stopping (Optuna's SuccessiveHalvingPruner): trials compared at min_steps, x factor, x factor^2, ...

    Asynchronous by default: a trial's value at a rung is judged as soon as it is reported, against the
    values already recorded there, and the trial goes on in the same process or is stopped at once.
    ``sync``: every trial stops at each rung and waits until all have reached it; those promoted resume
    from their checkpoint (a result that does not hang on which trial ran faster; recipes only).
    """

    min_steps: int = Field(ge=1, le=10**9, description="the first rung: every trial runs this many steps")
    reduction_factor: int = Field(default=3, ge=2, le=16, description="1 in this many trials goes on at each rung")
    sync: bool = Field(default=False, description="stop at each rung and decide once every trial got there")
    max_steps: int | None = Field(default=None, ge=1, le=10**12,
                                  description="a script trial's whole length in steps (rungs stop below it)")


class SweepCreate(RequestBody):
    name: str = Field(min_length=1, max_length=200)
    recipe: str | None = Field(default=None, min_length=1, max_length=128)
    config: dict[str, Any] = Field(default_factory=dict, description="the recipe config every trial starts from")
    script: ScriptTemplate | None = None
    space: dict[Annotated[str, Field(pattern=PARAM_NAME)], SpaceEntry] = Field(min_length=1, max_length=32)
    method: Literal["grid", "random", "tpe"] = "grid"
    trials: int | None = Field(default=None, ge=1, le=MAX_TRIALS, description="random/TPE: how many; grid: at most")
    asha: Asha | None = None
    metric: str = Field(default="loss", min_length=1, max_length=128)
    direction: Literal["minimize", "maximize"] = "minimize"
    parallel: int = Field(default=4, ge=1, le=256, description="trials queued or running at once")
    seed: int | None = Field(default=None, ge=0, le=2**31 - 1)
    host: str | None = Field(default=None, max_length=255)
    pool: str | None = Field(default=None, min_length=1, max_length=64, pattern="^[a-z0-9][a-z0-9_-]*$",
                             description="run every trial in this pool (a Slurm partition an admin added) as a Slurm "
                                         "job of the owner's; early stopping cancels the job")
    priority: int = Field(default=0, ge=-MAX_PRIORITY, le=MAX_PRIORITY)
    memory_mb: int | None = Field(default=None, ge=1, le=MAX_MEMORY_MB, description="memory of one trial, if known")
    max_restarts: int = Field(default=2, ge=0, le=100)

    @model_validator(mode="after")
    def _coherent(self) -> SweepCreate:
        if (self.recipe is None) == (self.script is None):
            raise ValueError("name a recipe (with its config) or a script, not both and not neither")
        if self.host and self.pool:
            raise ValueError("give host (one of the team's hosts) or pool (a Slurm pool), not both")
        if self.script is not None:
            if self.config:
                raise ValueError("a script sweep has no config: its parameters go into script.argv as {name}")
            if self.asha is not None and self.asha.sync:
                raise ValueError("synchronous early stopping (asha.sync) needs a recipe: it stops each trial at a "
                                 "rung and resumes it from a checkpoint; leave sync out for a script")
            used = set(re.findall(r"\{([A-Za-z_][A-Za-z0-9_]*)\}", " ".join(self.script.argv)))
            unused = sorted(set(self.space) - used)
            if unused:
                raise ValueError(f"space names {', '.join(unused)} but script.argv has no "
                                 f"{', '.join('{' + n + '}' for n in unused)}")
        if self.recipe is not None and self.asha is not None and self.asha.max_steps is not None:
            raise ValueError("asha.max_steps is a script's length; a recipe trial's length is its config's "
                             "max_steps (set it in config or search it in space)")
        if self.method == "grid":
            gridless = [n for n, e in self.space.items() if isinstance(e, SpaceRange) and e.grid() is None]
            if gridless:
                raise ValueError(f"a grid needs a list, or a range with step or count, for: {', '.join(gridless)}")
            if self.grid_size() > MAX_TRIALS:
                raise ValueError(f"the grid has {self.grid_size()} points; at most {MAX_TRIALS}")
        elif self.trials is None:
            raise ValueError(f"method {self.method} needs trials (how many to run)")
        return self

    def grid_values(self) -> dict[str, list[Any]]:
        return {n: (e.grid() or []) if isinstance(e, SpaceRange) else list(e) for n, e in self.space.items()}

    def grid_size(self) -> int:
        return math.prod(len(v) for v in self.grid_values().values())

    def total_trials(self) -> int:
        if self.method == "grid":
            return min(self.grid_size(), self.trials or MAX_TRIALS)
        return self.trials or 1

    def corners(self) -> list[dict[str, Any]]:
        """Parameter sets that reach every extreme of the space (checked against the recipe at start)."""
        ends = {n: ([e.low, e.high] if isinstance(e, SpaceRange) else list(e)) for n, e in self.space.items()}
        names = list(ends)
        combos = itertools.islice(itertools.product(*(ends[n] for n in names)), 256)
        return [dict(zip(names, c, strict=True)) for c in combos]
