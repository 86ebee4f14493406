"""Schemas of the trainings resource."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpufleet.api.schemas.bounds import CONFIG_SCHEMA, INT32_MAX, MAX_GPUS, MAX_MEMORY_MB, GPUIndex, check_config

# The recipe's config: free-form, with bounds on what the server stores or opens.
RecipeConfig = Field(default_factory=dict, json_schema_extra=CONFIG_SCHEMA)


class TrainingCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=255)
    kind: Literal["recipe", "script"] = Field(default="recipe", description="a built-in/plugin recipe, or your own code")
    recipe: str | None = Field(default=None, min_length=1, max_length=128, description="kind recipe: its name")
    config: dict[str, Any] = RecipeConfig
    code: str | None = Field(default=None, min_length=64, max_length=64, pattern="^[0-9a-f]{64}$",
                             description="kind script: the hash POST /api/v1/code returned")
    argv: list[Annotated[str, Field(max_length=4096)]] | None = Field(
        default=None, min_length=1, max_length=256,
        description="kind script: the command run once per GPU, as a list (never through a shell)")
    env: dict[Annotated[str, Field(max_length=128)], Annotated[str, Field(max_length=4096)]] | None = Field(
        default=None, max_length=64,
        description="kind script: environment variables to set; only names the server allows (script_env_allow)")
    memory: Annotated[str, Field(max_length=32)] | Annotated[int, Field(ge=1, le=2**50)] | None = Field(
        default=None, description="kind script: memory one rank needs on its GPU ('20GiB' or bytes)")
    python: str | None = Field(default=None, max_length=64,
                               description="kind script: an interpreter the server lists (GPUFLEET_PYTHONS)")
    gpu_ids: list[GPUIndex] | None = Field(
        default=None, max_length=MAX_GPUS, description="GPU indexes on the host; omit to let the server choose"
    )
    host: str | None = Field(default=None, max_length=255)
    distributed: bool | None = Field(default=None, description="DDP over the GPUs; implied by more than one GPU")
    world_size: int | None = Field(default=None, ge=1, le=1024, description="number of GPUs when gpu_ids is omitted")
    priority: int = Field(default=0, ge=-1000, le=1000)
    max_restarts: int = Field(default=2, ge=0, le=100)
    checkpoint_every: int | None = Field(default=None, ge=1, le=INT32_MAX)
    allow_rebalance: bool = Field(
        default=False, description="on out of memory, resume once with half the micro-batch and twice the accumulation"
    )
    memory_mb: int | None = Field(default=None, ge=1, le=MAX_MEMORY_MB, description="memory one rank needs, if known")

    _config = field_validator("config")(classmethod(lambda cls, v: check_config(v)))


class BatchItem(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=255)
    recipe: str = Field(min_length=1, max_length=128)
    config: dict[str, Any] = RecipeConfig
    memory_mb: int | None = Field(default=None, ge=1, le=MAX_MEMORY_MB)

    _config = field_validator("config")(classmethod(lambda cls, v: check_config(v)))


class TrainingBatchCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    items: list[BatchItem] = Field(min_length=1, max_length=2000)
    strategy: Literal["round_robin", "load_balance", "affinity"] = "load_balance"
    host: str | None = Field(default=None, max_length=255)
    priority: int = Field(default=0, ge=-1000, le=1000)
    max_restarts: int = Field(default=2, ge=0, le=100)


class TrainingGPU(BaseModel):
    index: int
    exclusive: bool
    allocated_at: datetime
    released_at: datetime | None


class TrainingPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: uuid.UUID
    name: str
    owner: str
    kind: str = "recipe"
    recipe: str
    code_hash: str | None = None
    argv: list[str] | None = None
    env: dict[str, str] | None = None
    memory_declared: int | None = None
    config: dict[str, Any]
    status: str
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
    measured_peak_memory: int | None
    peak_memory_per_rank: list[int] | None
    restarts: int
    max_restarts: int
    allow_rebalance: bool
    attempt: int
    launcher_pid: int | None
    exit_code: int | None
    cancel_requested: bool
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


class TrainingLogPublic(BaseModel):
    offset: int
    next_offset: int
    size: int
    text: str
