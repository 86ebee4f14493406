"""A training's statuses, defined once.

``queued -> scheduled -> running -> succeeded | failed | cancelled | reclaimed | pruned``,
``running -> preempted -> queued`` (:mod:`gpufleet.lifecycle.transitions`).

The database column, the API's ``TrainingPublic.status`` (an enum in the
OpenAPI document), the Python client and the dashboard (generated from that
document: ``frontend/scripts/gen-api.sh``) all take them from here.
"""

from __future__ import annotations

from typing import Literal, get_args

# ``preempted``: checkpointed and stopped for a higher-priority training; it
# keeps its GPUs reserved for that training until it takes them, then goes
# back to ``queued``. ``reclaimed``: stopped (with a checkpoint) because its
# GPUs stayed idle (gpufleet.scheduling.idle). ``pruned``: a sweep's trial stopped at a rung by early
# stopping (gpufleet.sweeps), not by a person: the sweep's decision, not a failure or a cancel.
TrainingStatus = Literal["queued", "scheduled", "running", "preempted", "succeeded", "failed", "cancelled",
                         "reclaimed", "pruned"]
# Those a training does not leave by itself (a resume makes a new attempt of a final one).
FinalStatus = Literal["succeeded", "failed", "cancelled", "reclaimed", "pruned"]

TRAINING_STATUSES: tuple[TrainingStatus, ...] = get_args(TrainingStatus)
ACTIVE_STATUSES: tuple[TrainingStatus, ...] = ("scheduled", "running")
FINAL_STATUSES: tuple[FinalStatus, ...] = get_args(FinalStatus)

# A sweep: running -> succeeded (a best trial) | failed (no trial completed) | cancelled
SweepStatus = Literal["running", "succeeded", "failed", "cancelled"]
# A trial. running: its training is queued or runs; rung: it stopped at a rung and waits for the decision;
# pruned: stopped early (its checkpoint stays); complete: ran every step.
TrialState = Literal["running", "rung", "pruned", "complete", "failed", "cancelled"]
SWEEP_STATUSES: tuple[SweepStatus, ...] = get_args(SweepStatus)
TRIAL_STATES: tuple[TrialState, ...] = get_args(TrialState)
