"""Bodies and answers of GPU selection: ranked recommendations, validation of a choice, memory estimates.

Shared by the routes (``api/routes/selection.py``), the Python client and
``gpufleet recommend --local``, so they load no FastAPI.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from gpufleet.bounds import MAX_HOST_CHARS, MAX_MEMORY_MB, GPUIndex, RequestBody
from gpufleet.wire.pools import PoolNode
from gpufleet.wire.training_requests import CONFIG_SCHEMA, check_config, installed_recipes

MAX_COUNT = 64


class EstimatePublic(BaseModel):
    total: int
    summary: str
    breakdown: dict[str, int]
    method: str
    key: str
    strategy: str
    precision: str
    world_size: int
    micro_batch_size: int
    parameter_count: int
    calibrated_from: int
    uncalibrated_total: int


class CandidatePublic(BaseModel):
    host: str
    gpu_indexes: list[int]
    score: float
    connection: str
    reasons: list[str]
    free_memory: list[int]
    weights: list[float]


class AcrossHostsPublic(BaseModel):
    """One set of GPUs on several hosts: a part per host, rank 0 on the first."""

    hosts: int
    parts: list[CandidatePublic]
    reasons: list[str]


class PoolFitPublic(BaseModel):
    """A recommendation on a Slurm pool: the job's layout over the pool's declared GPUs. Slurm owns its queue,
    so when the job starts, and on which nodes, is Slurm's answer; the partition's nodes show how busy it is."""

    pool: str
    nodes: int = Field(description="nodes the job takes")
    gpus_per_node: int = Field(description="GPUs it takes on each")
    gpu_model: str | None
    gpu_memory: int = Field(description="bytes of one of the pool's GPUs, as its admin declared")
    reason: str
    partition_nodes: list[PoolNode] | None = Field(
        default=None, description="the partition's nodes now, as sinfo reports them; null: Slurm did not answer")


class RecommendationPublic(BaseModel):
    memory_bytes: int
    count: int
    host: str | None
    policy: str
    candidates: list[CandidatePublic]
    wait_reason: str | None = None
    estimate: EstimatePublic | None = None
    across_hosts: list[AcrossHostsPublic] = Field(
        default_factory=list, description="with across_hosts: sets on the fewest hosts when no single host fits")
    pool: PoolFitPublic | None = Field(default=None, description="with pool: the layout on that Slurm pool "
                                                                 "(candidates, which name the team's GPUs, stay empty)")


class RecommendBody(RequestBody):
    """A full training config: the memory comes from its estimate."""

    recipe: str = Field(min_length=1, max_length=128, json_schema_extra=installed_recipes)
    config: dict[str, Any] = Field(default_factory=dict, json_schema_extra=CONFIG_SCHEMA)
    count: int = Field(default=1, ge=1, le=MAX_COUNT)
    host: str | None = Field(default=None, max_length=255)
    policy: Literal["pack", "spread"] = "pack"
    exclusive: bool = True
    max_candidates: int = Field(default=5, ge=1, le=50)
    across_hosts: bool = Field(default=False, description="when no single host fits, offer sets across hosts")
    pool: str | None = Field(default=None, min_length=1, max_length=63, pattern="^[a-z0-9][a-z0-9_-]*$",
                             description="on this Slurm pool's declared GPUs instead of the team's hosts")

    _config = field_validator("config")(classmethod(lambda cls, v: check_config(v)))

    @model_validator(mode="after")
    def _one_place(self) -> RecommendBody:
        if self.pool is not None and (self.host is not None or self.across_hosts):
            raise ValueError("give host or across_hosts (the team's hosts) or pool (a Slurm pool), not both")
        return self


class FitBody(RequestBody):
    """A recipe's config whose layout gpufleet chooses: ranks, strategy, micro-batch, accumulation."""

    recipe: str = Field(min_length=1, max_length=128, json_schema_extra=installed_recipes)
    config: dict[str, Any] = Field(default_factory=dict, json_schema_extra=CONFIG_SCHEMA,
                                   description="the recipe's fields; its global_batch_size is kept, and "
                                               "micro_batch_size, grad_accum_steps and strategy are chosen")
    count: int | None = Field(default=None, ge=1, le=MAX_COUNT,
                              description="exactly this many GPUs; empty: 1, 2, 4, … up to the most one host has")
    host: str | None = Field(default=None, max_length=MAX_HOST_CHARS, description="only this host")
    pool: str | None = Field(default=None, min_length=1, max_length=63, pattern="^[a-z0-9][a-z0-9_-]*$",
                             description="fit on this Slurm pool's GPUs (its declared GPU model, memory and GPUs "
                                         "per node) instead of the team's hosts")

    _config = field_validator("config")(classmethod(lambda cls, v: check_config(v)))

    @model_validator(mode="after")
    def _one_place(self) -> FitBody:
        if self.host is not None and self.pool is not None:
            raise ValueError("give host (one of the team's hosts) or pool (a Slurm pool), not both")
        return self


class FitOptionPublic(BaseModel):
    """One layout of the global batch and where it fits."""

    world_size: int
    strategy: str = Field(description="single (one GPU), ddp or fsdp")
    micro_batch_size: int
    grad_accum_steps: int
    memory_bytes: int = Field(description="the estimate per rank (what the scheduler reserves on each GPU)")
    fits: Literal["now", "later"] = Field(description="now: on GPUs free now (on a pool: its GPUs hold it, and "
                                                      "Slurm starts it when it can); later: once GPUs free up")
    host: str | None = Field(default=None, description="where it fits now")
    pool: str | None = Field(default=None, description="the Slurm pool whose GPUs hold it")
    gpu_indexes: list[int] = Field(default_factory=list)
    reason: str = ""
    config: dict[str, Any] = Field(description="the fields to send with the training for this layout "
                                               "(strategy, micro_batch_size, grad_accum_steps)")


class FitPublic(BaseModel):
    recipe: str
    global_batch_size: int
    pick: FitOptionPublic | None = Field(description="the first layout that fits now (fewest GPUs, DDP before "
                                                     "FSDP, largest micro-batch), else the first that fits later")
    why: str
    options: list[FitOptionPublic] = Field(description="each world size and strategy tried, with its largest "
                                                       "micro-batch that fits")
    never: list[str] = Field(default_factory=list, description="layouts no host of the fleet (or GPU of the "
                                                                "pool) can hold")


class ValidatePart(RequestBody):
    host: str = Field(min_length=1, max_length=MAX_HOST_CHARS)
    gpu_ids: list[GPUIndex] = Field(min_length=1, max_length=MAX_COUNT)


class ValidateBody(RequestBody):
    gpu_ids: list[GPUIndex] | None = Field(default=None, min_length=1, max_length=MAX_COUNT,
                                           description="GPUs on one host; or give parts")
    parts: list[ValidatePart] | None = Field(default=None, min_length=1, max_length=256,
                                             description="a selection across hosts: each host's GPUs, rank 0 first")
    host: str | None = Field(default=None, max_length=MAX_HOST_CHARS)
    memory_mb: int | None = Field(default=None, ge=0, le=MAX_MEMORY_MB)
    recipe: str | None = Field(default=None, max_length=128, json_schema_extra=installed_recipes)
    config: dict[str, Any] | None = Field(default=None, json_schema_extra=CONFIG_SCHEMA)
    exclusive: bool = True

    _config = field_validator("config")(classmethod(lambda cls, v: v if v is None else check_config(v)))

    @model_validator(mode="after")
    def _one_memory_source(self) -> ValidateBody:
        if self.memory_mb is not None and self.recipe is not None:
            raise ValueError("give memory_mb or recipe (+ config), not both")
        if self.config is not None and self.recipe is None:
            raise ValueError("config needs recipe: name the recipe the config is for")
        if (self.gpu_ids is None) == (self.parts is None):
            raise ValueError("give gpu_ids (one host) or parts (several hosts), not both and not neither")
        if self.parts is not None and self.host is not None:
            raise ValueError("host names one host; with parts each part names its host")
        return self

    @property
    def count(self) -> int:
        return len(self.gpu_ids) if self.gpu_ids is not None else sum(len(p.gpu_ids) for p in self.parts or [])


class ProblemPublic(BaseModel):
    code: str
    message: str
    gpu_index: int | None = None


class ValidationPublic(BaseModel):
    ok: bool
    host: str | None
    gpu_ids: list[int]
    memory_bytes: int
    problems: list[ProblemPublic]
    warnings: list[ProblemPublic]
    weights: list[float]
    estimate: EstimatePublic | None = None


def estimate_public(est: Any) -> EstimatePublic:
    """The API's view of a ``scheduling.memory`` estimate."""
    return EstimatePublic(
        total=est.total, summary=est.summary(), breakdown=est.breakdown(), method=est.method, key=est.key,
        strategy=est.strategy, precision=est.precision, world_size=est.world_size,
        micro_batch_size=est.micro_batch_size, parameter_count=est.parameter_count,
        calibrated_from=est.calibrated_from, uncalibrated_total=est.uncalibrated_total,
    )
