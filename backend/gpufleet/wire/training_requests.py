"""A training request as the API, the client and the CLI send it, checked once by pydantic.

The recipe's ``config`` stays a mapping here: which fields it has depends on
the recipe it names, so :mod:`gpufleet.trainings.service` checks it against that recipe's config
model (every wrong field at once) before anything is written.
"""

from __future__ import annotations

import math
import uuid
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from gpufleet.bounds import (
    INT32_MAX,
    JSON_INT_MAX,
    MAX_GPUS,
    MAX_MEMORY_MB,
    MAX_PATH_CHARS,
    MAX_PATH_PART_CHARS,
    MAX_PRIORITY,
    GPUIndex,
    RequestBody,
)
from gpufleet.engine.config import TrainConfig
from gpufleet.engine.recipes import recipe_names


def _int_bounds(name: str) -> tuple[int, int]:
    """The bounds :class:`TrainConfig` declares for one of its integer fields."""
    info = TrainConfig.model_fields[name]
    lo = next(m.ge for m in info.metadata if getattr(m, "ge", None) is not None)
    hi = next(m.le for m in info.metadata if getattr(m, "le", None) is not None)
    return lo, hi


def _float_bounds(name: str) -> dict[str, float]:
    """The JSON-schema bounds :class:`TrainConfig` declares for one of its float fields."""
    words = {"ge": "minimum", "gt": "exclusiveMinimum", "le": "maximum", "lt": "exclusiveMaximum"}
    info = TrainConfig.model_fields[name]
    return {words[k]: getattr(m, k) for m in info.metadata for k in words if getattr(m, k, None) is not None}


# Config fields the server stores in INTEGER columns (or hands to a seed), with
# the bounds the shared training config declares; the recipe checks the rest.
_CONFIG_INTS = {name: _int_bounds(name) for name in (
    "max_steps", "checkpoint_every", "log_every", "global_batch_size", "micro_batch_size",
    "grad_accum_steps", "keep_checkpoints", "warmup_steps", "seed")}

# The shared float fields, with their finite bounds; a recipe's own floats are bounded by its config.
_CONFIG_FLOATS = ("lr", "weight_decay", "ddp_bucket_mb", "grad_clip")

CONFIG_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": True,
    "properties": {
        **{name: {"type": ["integer", "null"] if name == "micro_batch_size" else "integer", "minimum": lo,
                  "maximum": hi} for name, (lo, hi) in _CONFIG_INTS.items()},
        **{name: {"type": ["number", "null"] if name == "grad_clip" else "number", **_float_bounds(name)}
           for name in _CONFIG_FLOATS},
        "data_path": {"type": ["string", "null"], "maxLength": MAX_PATH_CHARS},
    },
    "description": (
        "the recipe's config fields; numbers anywhere in it are finite (no NaN or Infinity), integers lie within"
        f" ±{JSON_INT_MAX}, and data_path has at most {MAX_PATH_CHARS} characters,"
        f" {MAX_PATH_PART_CHARS} per part"
    ),
}


def _check_numbers(where: str, value: Any) -> None:
    if isinstance(value, bool):
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where} is {value}; give a finite number (JSON has no NaN or Infinity)")
    if isinstance(value, int) and not -JSON_INT_MAX <= value <= JSON_INT_MAX:
        raise ValueError(f"{where} is {value}, beyond ±{JSON_INT_MAX} (the largest exact JSON integer)")
    if isinstance(value, dict):
        for k, v in value.items():
            _check_numbers(f"{where}.{k}", v)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_numbers(f"{where}[{i}]", v)


def check_config(config: dict[str, Any]) -> dict[str, Any]:
    """Refuse numbers and paths in a recipe config that no column or file system holds; names the field.

    Whatever the recipe, before it is looked up: the recipe's own config model
    then checks every field's meaning (below a minimum is its to say, in its words).
    """
    for name, (lo, hi) in _CONFIG_INTS.items():
        value = config.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > hi:
            raise ValueError(f"config.{name} is {value}; it must be between {lo} and {hi}")
    _check_numbers("config", config)
    data_path = config.get("data_path")
    if isinstance(data_path, str):
        if len(data_path) > MAX_PATH_CHARS:
            raise ValueError(f"config.data_path has {len(data_path)} characters; at most {MAX_PATH_CHARS} are allowed")
        longest = max((len(p) for p in data_path.split("/")), default=0)
        if longest > MAX_PATH_PART_CHARS:
            raise ValueError(f"config.data_path has a part of {longest} characters; file and folder names "
                             f"have at most {MAX_PATH_PART_CHARS}")
    return config


def installed_recipes(schema: dict[str, Any]) -> None:
    """The installed recipes as the field's enum: an unknown name is refused, so the schema says so.

    Read when the schema is built, so a plugin recipe is in the live schema.
    """
    target = next((s for s in schema.get("anyOf", []) if s.get("type") == "string"), schema)
    target["enum"] = recipe_names()


# The recipe's config: free-form, with bounds on what the server stores or opens.
RecipeConfig: dict[str, Any] = Field(default_factory=dict, json_schema_extra=CONFIG_SCHEMA)


# A training across hosts names how many hosts it wants, or which.
HostCount = Annotated[int, Field(ge=1, le=256)]
HostNames = Annotated[list[Annotated[str, Field(min_length=1, max_length=255)]], Field(min_length=1, max_length=256)]


class TrainingCreate(RequestBody):
    name: str = Field(min_length=1, max_length=255)
    kind: Literal["recipe", "script"] = Field(default="recipe",
                                              description="a built-in/plugin recipe, or your own code")
    recipe: str | None = Field(default=None, min_length=1, max_length=128, description="kind recipe: its name",
                               json_schema_extra=installed_recipes)
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
    requirements: str | None = Field(
        default=None, min_length=1, max_length=512,
        description="kind script: the file in the code the training's environment is built from (a requirements "
                    ".txt, or pyproject.toml with uv.lock beside it); omit for none")
    gpu_ids: list[GPUIndex] | None = Field(
        default=None, max_length=MAX_GPUS, description="GPU indexes on the host; omit to let the server choose"
    )
    host: str | None = Field(default=None, max_length=255)
    distributed: bool | None = Field(default=None, description="DDP over the GPUs; implied by more than one GPU")
    world_size: int | None = Field(default=None, ge=1, le=1024, description="number of GPUs when gpu_ids is omitted")
    hosts: HostCount | HostNames | None = Field(
        default=None, description="across hosts: how many hosts, or their names (rank 0 on the first)")
    gpus_per_host: int | None = Field(default=None, ge=1, le=64, description="across hosts: GPUs (ranks) on each")
    spread: Literal["auto"] | None = Field(
        default=None, description="auto: one host when one fits, else the fewest hosts that hold world_size")
    priority: int = Field(
        default=0, ge=-MAX_PRIORITY, le=MAX_PRIORITY,
        description="higher goes first and may preempt lower; a member may go above 0 only up to the cap an admin"
                    " set for them or their group (else GPUFLEET_MEMBER_MAX_PRIORITY): beyond it a 403")
    max_restarts: int = Field(default=2, ge=0, le=100)
    checkpoint_every: int | None = Field(default=None, ge=1, le=INT32_MAX)
    allow_rebalance: bool = Field(
        default=False, description="on out of memory, resume once with half the micro-batch and twice the accumulation"
    )
    memory_mb: int | None = Field(default=None, ge=1, le=MAX_MEMORY_MB, description="memory one rank needs, if known")
    max_runtime_s: int | None = Field(
        default=None, ge=1, le=366 * 86400,
        description="the longest one attempt may run, in seconds: past it the training is checkpointed and stopped "
                    "(failed). With it, the training may use GPUs that a higher-priority one waits for, when it "
                    "ends before they would free up (backfill)")
    preemptible: bool | None = Field(
        default=None, description="a higher-priority training may checkpoint and stop it to take its GPUs (it "
                                  "resumes later, no restart counted); omit for the server's default: yes for "
                                  "members, no for admins. false needs the non_preemptible permission for "
                                  "members (else a 403)")
    from_training: Annotated[uuid.UUID, Field(strict=False)] | None = Field(  # strict bodies: a UUID comes as text
        default=None, description="start from this training's newest checkpoint (yours, or any as an admin), "
                                  "with this request's config and arguments: a clone with changes")
    pool: str | None = Field(default=None, min_length=1, max_length=64, pattern="^[a-z0-9][a-z0-9_-]*$",
                             description="run in this pool (a Slurm partition an admin added) instead of the "
                                         "team's hosts")
    or_pool: str | None = Field(default=None, min_length=1, max_length=64, pattern="^[a-z0-9][a-z0-9_-]*$",
                                description="run on the team's hosts, or in this pool when no GPU (set) of the "
                                            "team's hosts can ever hold it (too many GPUs, too much memory); "
                                            "not with pool, host or gpu_ids")

    _config = field_validator("config")(classmethod(lambda cls, v: check_config(v)))


class TrainingResume(RequestBody):
    config: dict[str, Any] = Field(
        default_factory=dict, description="recipe trainings: fields to change before it continues (e.g. a larger "
                                          "max_steps for one that succeeded)")

    _config = field_validator("config")(classmethod(lambda cls, v: check_config(v)))


class BatchItem(RequestBody):
    name: str = Field(min_length=1, max_length=255)
    recipe: str = Field(min_length=1, max_length=128, json_schema_extra=installed_recipes)
    config: dict[str, Any] = RecipeConfig
    memory_mb: int | None = Field(default=None, ge=1, le=MAX_MEMORY_MB)

    _config = field_validator("config")(classmethod(lambda cls, v: check_config(v)))


class TrainingBatchCreate(RequestBody):
    items: list[BatchItem] = Field(min_length=1, max_length=2000)
    strategy: Literal["round_robin", "load_balance", "affinity"] = "load_balance"
    host: str | None = Field(default=None, max_length=255)
    priority: int = Field(default=0, ge=-MAX_PRIORITY, le=MAX_PRIORITY,
                          description="every item's priority, within the member's cap as for one training")
    max_restarts: int = Field(default=2, ge=0, le=100)

    def requests(self) -> list[TrainingCreate]:
        """One single-GPU request per item, with the batch's host, priority and restarts."""
        return [TrainingCreate(name=item.name, recipe=item.recipe, config=item.config, memory_mb=item.memory_mb,
                               host=self.host, priority=self.priority, max_restarts=self.max_restarts,
                               world_size=1)
                for item in self.items]
