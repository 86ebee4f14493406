"""Early stopping at rungs (``min_steps x factor^k`` steps), decided by Optuna's SuccessiveHalvingPruner.

Asynchronous (the default, as Li et al.'s ASHA): a trial runs its whole
length; as soon as it reports a rung's step, its value there is put to the
pruner against the values already recorded at that rung (:func:`decide` with
one trial). Promoted, it simply goes on in the same process; pruned, it is
stopped then and its GPU goes to the next trial.

Synchronous (``asha.sync``): a trial runs to its next rung (its training's
``max_steps``) and ends there with a checkpoint, freeing its GPU. Once no
trial can still reach a rung (every trial was started and none runs below
it), the trials waiting there are decided together: each is put to the
pruner beside the others' values at that rung, so the outcome does not hang
on which trial got there first. Losers are pruned (their checkpoint stays);
the others resume from their checkpoint to the next rung, or to the end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState


def rung_steps(min_steps: int, factor: int, full: int) -> list[int]:
    """The rungs below the full length: min_steps, min_steps x factor, ... (each < full)."""
    steps, s = [], min_steps
    while s < full:
        steps.append(s)
        s *= factor
    return steps


def target_steps(rung: int | None, min_steps: int, factor: int, full: int) -> int:
    """How far a trial heading to ``rung`` runs (None: past the last rung, to the end)."""
    rungs = rung_steps(min_steps, factor, full)
    return full if rung is None or rung >= len(rungs) else rungs[rung]


def next_rung(rung: int, min_steps: int, factor: int, full: int) -> int | None:
    return rung + 1 if rung + 1 < len(rung_steps(min_steps, factor, full)) else None


@dataclass
class _Peers:
    """The study as the pruner sees it while it judges one trial: every trial but that one.

    The pruner counts the judged trial's own value itself; hiding its record of
    the rung keeps it from being counted twice when all values are recorded first.
    """

    study: optuna.Study
    hidden: int

    def get_trials(self, deepcopy: bool = True, states: Any = None) -> list[FrozenTrial]:
        return [t for t in self.study.get_trials(deepcopy=deepcopy, states=states) if t.number != self.hidden]

    @property
    def direction(self) -> optuna.study.StudyDirection:
        return self.study.direction

    @property
    def _storage(self) -> Any:  # what the pruner writes its rung records through
        return self.study._storage


def decide(study: optuna.Study, pruner: optuna.pruners.BasePruner, waiting: dict[int, tuple[int, float]],
           rung: int) -> dict[int, bool]:
    """``waiting``: trial number -> (step, value) at ``rung``. Returns number -> pruned."""
    storage = study._storage
    key = f"completed_rung_{rung}"
    before: dict[int, FrozenTrial] = {}
    for t in study.get_trials(deepcopy=True, states=(TrialState.RUNNING,)):
        if t.number in waiting:
            step, value = waiting[t.number]
            storage.set_trial_intermediate_value(t._trial_id, step, value)
            attrs = {k: v for k, v in t.system_attrs.items() if k != key}
            before[t.number] = FrozenTrial(
                number=t.number, state=t.state, value=None, datetime_start=t.datetime_start, datetime_complete=None,
                params=t.params, distributions=t.distributions, user_attrs=t.user_attrs, system_attrs=attrs,
                intermediate_values={**t.intermediate_values, step: value}, trial_id=t._trial_id,
                values=None)
    for number, frozen in before.items():  # every value at the rung is on record before any is judged
        storage.set_trial_system_attr(frozen._trial_id, key, waiting[number][1])
    return {n: bool(pruner.prune(_Peers(study, n), before[n])) for n in sorted(before)}  # type: ignore[arg-type]


def reached(study: optuna.Study, rung: int) -> int:
    """How many trials have a value on record at ``rung``: what a promotion there was judged among."""
    key = f"completed_rung_{rung}"
    return sum(1 for t in study.get_trials(deepcopy=False) if key in t.system_attrs)
