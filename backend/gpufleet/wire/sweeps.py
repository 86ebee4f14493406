"""Schemas of the sweeps resource: what the API answers (it accepts :class:`.sweep_requests.SweepCreate`)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel

from gpufleet.wire.trainings import TrainingStatus
from gpufleet.db.statuses import SweepStatus, TrialState


class SweepTrialPublic(BaseModel):
    number: int
    params: dict[str, Any]
    state: TrialState
    metric: float | None
    metric_step: int | None
    rung: int | None
    reason: str | None
    oom_retried: bool
    training_id: uuid.UUID | None
    training_status: TrainingStatus | None
    host: str | None
    gpu_ids: list[int] | None
    step: int | None
    max_steps: int | None


class SweepPublic(BaseModel):
    id: uuid.UUID
    name: str
    owner: str
    status: SweepStatus
    status_reason: str | None
    method: str
    early_stopping: bool
    metric: str
    direction: Literal["minimize", "maximize"]
    parallel: int
    total_trials: int
    trials_by_state: dict[str, int]
    best_trial: int | None
    created_at: datetime
    finished_at: datetime | None


class SweepDetail(SweepPublic):
    spec: dict[str, Any]
    trials: list[SweepTrialPublic]
    best: SweepTrialPublic | None


class SweepsPublic(BaseModel):
    data: list[SweepPublic]
    count: int


class SweepCurve(BaseModel):
    number: int
    training_id: uuid.UUID
    points: list[tuple[int, float]]


class SweepCurvesPublic(BaseModel):
    metric: str
    data: list[SweepCurve]
