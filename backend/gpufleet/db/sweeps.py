"""Tables of sweeps: one search over a recipe's config or a script's arguments, and its trials.

Each trial is an ordinary training (``trainings.sweep_id``); these rows keep
what the search needs beyond it: the parameters Optuna chose, the rung a trial
is heading to or waits at, and the metric it reported there. Optuna's own
study lives beside them (gpufleet.sweeps.study).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import Boolean, Float, ForeignKey, Integer, String, Text, UniqueConstraint, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from gpufleet.db.base import Base
from gpufleet.db.types import JSONDoc, UTCDateTime, utcnow

from gpufleet.db.statuses import SWEEP_STATUSES, TRIAL_STATES

__all__ = ["SWEEP_STATUSES", "TRIAL_STATES", "Sweep", "SweepTrial"]


class Sweep(Base):
    __tablename__ = "sweeps"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    name: Mapped[str] = mapped_column(String(255))
    owner: Mapped[str] = mapped_column(String(64), index=True)
    admin: Mapped[bool] = mapped_column(Boolean, default=False)  # the owner's role at start (the trials' defaults)
    status: Mapped[str] = mapped_column(String(32), default="running", index=True)
    status_reason: Mapped[str | None] = mapped_column(Text)
    # The request as validated (gpufleet.wire.sweep_requests.SweepCreate), the template of every trial.
    spec: Mapped[dict[str, Any]] = mapped_column(JSONDoc)
    total_trials: Mapped[int] = mapped_column(Integer)
    study_name: Mapped[str] = mapped_column(String(255))
    best_trial: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class SweepTrial(Base):
    __tablename__ = "sweep_trials"
    __table_args__ = (UniqueConstraint("sweep_id", "number"),)

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    sweep_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("sweeps.id", ondelete="CASCADE"), index=True)
    number: Mapped[int] = mapped_column(Integer)  # Optuna's trial number in the sweep's study
    training_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("trainings.id", ondelete="SET NULL"))
    params: Mapped[dict[str, Any]] = mapped_column(JSONDoc)
    state: Mapped[str] = mapped_column(String(16), default="running")
    rung: Mapped[int | None] = mapped_column(Integer)  # early stopping: the rung it heads to or waits at
    metric: Mapped[float | None] = mapped_column(Float)  # at its last rung, or at its end
    metric_step: Mapped[int | None] = mapped_column(Integer)
    oom_retried: Mapped[bool] = mapped_column(Boolean, default=False)
    reason: Mapped[str | None] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
