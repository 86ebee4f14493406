"""Schemas of the trainings resource: what the API answers.

What it accepts (``TrainingCreate``, ``TrainingBatchCreate``) is the trainings
domain's own request model, :mod:`gpufleet.wire.training_requests` (it validates
the recipe's config there); the package names it (``gpufleet.wire.TrainingCreate``)
and loads it only for a caller that sends one, so reading trainings never
builds the recipes' config models.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

# A training's status, an enum in the schema so generated clients can switch on it.
from gpufleet.db.statuses import TrainingStatus


class TrainingGPU(BaseModel):
    index: int
    exclusive: bool
    allocated_at: datetime
    released_at: datetime | None


class TrainingHostPublic(BaseModel):
    """One host of a training across hosts."""

    host: str
    node_rank: int = Field(description="0: the host of rank 0, which opens the rendezvous and checkpoints")
    ranks: list[int] = Field(description="the global ranks that run on this host")
    gpu_ids: list[int]
    status: str = Field(description="reserved | running | succeeded | failed | stopped")
    attempt: int | None
    heartbeat_at: datetime | None
    message: str | None


class TrainingPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: uuid.UUID
    name: str
    owner: str
    kind: str = "recipe"
    recipe: str
    pool: str | None = Field(default=None,
                             description="the pool (a Slurm partition) it runs in; null: the team's hosts")
    code_hash: str | None = None
    argv: list[str] | None = None
    env: dict[str, str] | None = None
    memory_declared: int | None = None
    config: dict[str, Any]
    status: TrainingStatus
    status_reason: str | None
    priority: int
    gpu_ids: list[int] | None
    distributed: bool
    world_size: int
    host_name: str | None = Field(default=None, description="the host that owns the GPUs")
    requested_host: str | None
    auto_select: bool
    exclusive: bool
    memory_estimate: int | None
    estimate: dict[str, Any] | None
    selection: dict[str, Any] | None
    wait_reason: str | None
    queue_position: int | None = Field(
        default=None, description="queued: its place in the queue (1 is served next), in the scheduler's order "
                                  "(priority, then age)")
    expected_start: datetime | None = Field(
        default=None, description="queued and served next: when the GPUs kept for it free up, from the max_runtime_s "
                                  "or measured progress of the trainings holding them; null when nobody can tell")
    measured_peak_memory: int | None
    peak_memory_per_rank: list[int] | None
    restarts: int
    max_restarts: int
    allow_rebalance: bool
    attempt: int
    launcher_pid: int | None
    exit_code: int | None
    cancel_requested: bool
    stopping: bool = Field(default=False, description="running, and a cancel asked it to stop: its ranks are being "
                                                      "stopped and it ends as cancelled within seconds")
    preemptible: bool = True
    preempted_by: uuid.UUID | None = Field(
        default=None, description="running: the training that asked it to checkpoint and stop; preempted: the "
                                  "training its GPUs are kept for")
    max_runtime_s: int | None = None
    idle_since: datetime | None = Field(default=None, description="since when its GPUs have been idle (below the "
                                                                  "idle threshold), while they are")
    idle_warned_at: datetime | None = Field(default=None, description="when it was warned that its GPUs are idle")
    step: int
    max_steps: int | None
    last_loss: float | None
    last_checkpoint: str | None
    event_seq: int
    created_at: datetime
    updated_at: datetime
    scheduled_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    gpus: list[TrainingGPU] = Field(default_factory=list, description="current reservation")
    gang: dict[str, Any] | None = Field(default=None, description="what a training across hosts asked for")
    resumed_from: uuid.UUID | None = Field(default=None, description="the training whose checkpoint it started from")
    hosts: list[TrainingHostPublic] | None = Field(
        default=None,
        description="a training across hosts: each host's ranks and GPUs (gpus lists every host's reservation)")


    @model_validator(mode="after")
    def _stopping(self) -> TrainingPublic:
        self.stopping = self.status == "running" and self.cancel_requested
        return self


class TrainingsPublic(BaseModel):
    data: list[TrainingPublic]
    count: int


class TrainingBatchPublic(BaseModel):
    batch_id: str
    strategy: str
    data: list[TrainingPublic]
    count: int


class TrainingEventPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    seq: int
    time: datetime
    kind: str
    status: str | None
    reason: str | None
    user: str | None
    data: dict[str, Any] | None


class TrainingEventsPublic(BaseModel):
    data: list[TrainingEventPublic]
    count: int


class TrainingMetricPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    step: int
    time: datetime
    loss: float | None
    metrics: dict[str, Any]
    rank_step_times: list[float] | None


class TrainingMetricsPublic(BaseModel):
    data: list[TrainingMetricPublic]
    count: int = Field(description="rows returned")
    total: int = Field(description="rows stored; more than count when downsampled")


class TrainingFilePublic(BaseModel):
    path: str = Field(description="relative to the training's files: checkpoints/... or outputs/...")
    size: int
    modified: datetime


class TrainingFilesPublic(BaseModel):
    data: list[TrainingFilePublic]
    count: int


class TrainingLogPublic(BaseModel):
    offset: int
    next_offset: int
    size: int
    text: str
