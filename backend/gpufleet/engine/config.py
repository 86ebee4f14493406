"""The training fields every recipe config shares, and how configs are read.

Torch-free on purpose: the API validates a training request with these classes
before anything is written, and the web app must not import torch.

A recipe config is a pydantic model that subclasses :class:`TrainConfig`.
Each field declares its type, bounds and one-line help with :func:`option`;
checks that span fields go in ``check``, which adds every problem to a
:class:`Problems` list. Constructing a config (from JSON, YAML or ``--set``
values) raises one :class:`TrainingConfigError` naming every wrong field at
once, which the API turns into a 422 listing each field and the CLI into a
clear message.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from gpufleet import yamltext
from gpufleet.bounds import INT32_MAX, JSON_INT_MAX, MAX_COEFF, MAX_MEMORY_MB, MAX_PATH_CHARS, MAX_PATH_PART_CHARS

PRECISIONS = ("fp32", "bf16", "fp16")
STRATEGIES = ("auto", "ddp", "fsdp")
LR_SCHEDULES = ("constant", "cosine", "linear")
FSDP_SHARDING = ("full_shard", "shard_grad_op")
PARALLEL_MODES = ("equal", "proportional", "independent")
# What a config value written as text means "empty" by (YAML's own words too).
_NULLS = {"null", "none", "~", ""}


class TrainingConfigError(ValueError):
    """One or more training config values are wrong.

    ``problems`` lists every ``(field, message)`` found (``field`` is None for
    a problem with no single field); ``field`` is the first one's field.
    """

    def __init__(self, field: str | None, message: str,
                 problems: list[tuple[str | None, str]] | None = None):
        self.problems = list(problems) if problems else [(field, message)]
        self.field = self.problems[0][0]
        super().__init__(_describe(self.problems))

    @classmethod
    def of(cls, problems: list[tuple[str | None, str]]) -> TrainingConfigError:
        field, message = problems[0]
        return cls(field, message, problems)


def _describe(problems: list[tuple[str | None, str]]) -> str:
    return "; ".join(f"{field}: {message}" if field else message for field, message in problems)


class Problems:
    """Collects every problem of a config, so a person learns them all at once."""

    def __init__(self) -> None:
        self.items: list[tuple[str | None, str]] = []

    def add(self, field: str | None, message: str) -> None:
        self.items.append((field, message))

    def raise_if_any(self) -> None:
        if self.items:
            raise TrainingConfigError.of(self.items)


def option(default: Any = ..., help: str = "", *,  # noqa: A002 - the form's word
           factory: Any = None, **bounds: Any) -> Any:
    """A config field with its one-line description (shown by ``GET /recipes`` and the form) and bounds.

    ``bounds`` are pydantic's (``ge``, ``gt``, ``le``, ``max_length`` ...): they
    are checked with the field's type and written into the JSON schema.
    """
    if factory is not None:
        return Field(default_factory=factory, description=help, **bounds)
    return Field(default=default, description=help, **bounds)


PositiveInt = Annotated[int, Field(ge=1, le=INT32_MAX)]


class TrainConfig(BaseModel):
    """Fields shared by every recipe; the defaults give a sensible short run."""

    # NaN and infinity are no number a step can use (JSON has neither); every float field has finite bounds.
    model_config = ConfigDict(extra="forbid", validate_default=False, allow_inf_nan=False)

    max_steps: int = option(200, "optimizer steps to run", ge=1, le=INT32_MAX)
    global_batch_size: int = option(
        256, "samples per optimizer step, summed over every rank and accumulation step", ge=1, le=INT32_MAX)
    micro_batch_size: int | None = option(
        None, "samples per rank per forward pass; empty = global batch / (ranks x accumulation steps)",
        ge=1, le=INT32_MAX)
    grad_accum_steps: int = option(1, "forward/backward passes per optimizer step", ge=1, le=INT32_MAX)
    lr: float = option(1e-3, "peak learning rate (AdamW)", gt=0, le=MAX_COEFF)
    weight_decay: float = option(0.0, "AdamW weight decay", ge=0, le=MAX_COEFF)
    precision: Literal["fp32", "bf16", "fp16"] = option(
        "fp32", "number format of the forward and backward passes (bf16/fp16 use autocast)")
    seed: int = option(0, "random seed for weights and data order; the same seed repeats a run",
                       ge=0, le=JSON_INT_MAX)
    checkpoint_every: int = option(100, "save a checkpoint every this many steps (and at the end)",
                                   ge=1, le=INT32_MAX)
    keep_checkpoints: int = option(3, "how many of the newest checkpoints to keep", ge=1, le=INT32_MAX)
    strategy: Literal["auto", "ddp", "fsdp"] = option(
        "auto", "how ranks share the model: ddp replicates it, fsdp shards it; auto picks ddp")
    fsdp_sharding: Literal["full_shard", "shard_grad_op"] = option(
        "full_shard", "FSDP only: shard parameters too (full_shard) or only gradients and optimizer state")
    ddp_bucket_mb: float = option(25.0, "DDP only: MiB of gradients sent per all-reduce bucket", gt=0,
                                  le=MAX_MEMORY_MB)
    grad_clip: float | None = option(1.0, "clip the gradient norm to this; empty = no clipping", gt=0,
                                     le=MAX_COEFF)
    warmup_steps: int = option(0, "steps of linear learning-rate warm-up from 0", ge=0, le=INT32_MAX)
    lr_schedule: Literal["constant", "cosine", "linear"] = option(
        "constant", "learning rate after warm-up: constant, or decaying to 0 by max_steps")
    # Ranks agree on metrics (and on a stop request) every log_every steps.
    log_every: int = option(10, "report loss and speed (charts, log line) every this many steps",
                            ge=1, le=INT32_MAX)
    data_path: str | None = option(
        None, "a data file under the server's data root; empty = the recipe's synthetic data",
        max_length=MAX_PATH_CHARS)
    # How ranks of unequal speed, or GPUs of several vendors, share the work
    # (engine/parallel.py; docs/architecture.md, "GPUs of unequal speed or several vendors").
    parallel_mode: Literal["equal", "proportional", "independent"] = option(
        "equal", "ranks share the work equally, by measured speed, or per vendor group merged every merge_every")
    rank_shares: list[Annotated[int, Field(ge=1, le=INT32_MAX)]] | None = option(
        None, "proportional only: each rank's first micro-batch (sum = global_batch_size); empty = equal",
        max_length=4096)
    merge_every: int = option(10, "independent only: average the replicas every this many steps (local SGD)",
                              ge=1, le=INT32_MAX)

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise TrainingConfigError.of(_problems(type(self), values, exc)) from None

    @field_validator("*", mode="before")
    @classmethod
    def _from_text(cls, value: Any, info: ValidationInfo) -> Any:
        """Values written as text (``--set``, forms): ``null`` for an optional field, ``64,64`` for a list.

        A number is never true or false (pydantic would read ``true`` as 1),
        and a name may be written as a number.
        """
        if info.field_name is None:
            return value
        hint = cls.model_fields[info.field_name].annotation
        args = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
        if isinstance(value, bool) and bool not in args and any(a in (int, float) for a in args):
            raise ValueError(f"must be a number, got {value!r}")
        lists = [typing.get_args(a)[0] for a in args if typing.get_origin(a) in (list, tuple) and typing.get_args(a)]
        items = [typing.get_args(i)[0] if typing.get_origin(i) is Annotated else i for i in lists]
        if isinstance(value, list) and any(i in (int, float) for i in items) \
                and any(isinstance(v, bool) for v in value):
            raise ValueError(f"must be a list of numbers, got {value!r}")
        if isinstance(value, (int, float)) and not isinstance(value, bool) and str in args:
            return str(value)
        if not isinstance(value, str):
            return value
        if value.strip().lower() in _NULLS and type(None) in args:
            return None
        if any(typing.get_origin(a) in (list, tuple) for a in args):
            text = value.strip()
            if not text.startswith("["):
                return [v.strip() for v in text.split(",") if v.strip()]
            try:
                return yamltext.load(text)
            except yaml.YAMLError as exc:
                raise ValueError(f"must be a list like [1, 2], got {value[:80]!r}: {exc}") from None
        return value

    @model_validator(mode="after")
    def _checked(self) -> TrainConfig:
        problems = Problems()
        self.check(problems)
        problems.raise_if_any()
        return self

    def check(self, p: Problems) -> None:
        """Add every problem that spans fields to ``p``; recipes extend it (each field's own bounds are declared)."""
        if self.global_batch_size % self.grad_accum_steps:
            p.add("grad_accum_steps",
                  f"{self.grad_accum_steps} does not divide global_batch_size {self.global_batch_size}")
        if self.warmup_steps > self.max_steps:
            p.add("warmup_steps", f"must be between 0 and max_steps ({self.max_steps}), got {self.warmup_steps}")
        if self.parallel_mode != "equal":
            if self.grad_accum_steps != 1:
                p.add("grad_accum_steps", f"parallel_mode {self.parallel_mode} takes one pass per step; "
                                          "set grad_accum_steps to 1")
            if self.micro_batch_size is not None:
                p.add("micro_batch_size", f"parallel_mode {self.parallel_mode} sets each rank's micro-batch "
                                          "itself; leave micro_batch_size empty")
            if self.strategy == "fsdp":
                p.add("strategy", f"parallel_mode {self.parallel_mode} keeps a whole replica per rank; "
                                  "use strategy auto or ddp")
        if self.rank_shares is not None:
            if self.parallel_mode != "proportional":
                p.add("rank_shares", "only parallel_mode proportional takes rank_shares")
            elif sum(self.rank_shares) != self.global_batch_size:
                p.add("rank_shares", f"must sum to global_batch_size {self.global_batch_size}, "
                                     f"got {sum(self.rank_shares)}")
        if self.data_path is not None:
            if not self.data_path.strip():
                p.add("data_path", "must be a path under the data root, or null for synthetic data")
            longest = max((len(part) for part in self.data_path.split("/")), default=0)
            if longest > MAX_PATH_PART_CHARS:
                p.add("data_path", f"has a part of {longest} characters; file and folder names have at most "
                                   f"{MAX_PATH_PART_CHARS}")

    def batch_layout(self, world_size: int) -> tuple[int, int]:
        """(micro_batch_size per rank, grad_accum_steps) for ``world_size`` ranks.

        The global batch never changes with the layout: that is what lets a run
        move between one and many devices, or halve its micro batch after an
        out-of-memory error, and still compute the same steps.
        """
        if world_size < 1:
            raise TrainingConfigError(None, f"world size must be >= 1, got {world_size}")
        if self.parallel_mode == "proportional":
            # Each rank's micro-batch is its share (engine/parallel.py); this
            # is the mean one, which is what a memory estimate needs.
            if self.rank_shares is not None and len(self.rank_shares) != world_size:
                raise TrainingConfigError(
                    "rank_shares", f"{len(self.rank_shares)} shares given for {world_size} rank(s); give one per rank")
            if self.global_batch_size < world_size:
                raise TrainingConfigError(
                    "global_batch_size", f"{self.global_batch_size} cannot give {world_size} ranks one sample each")
            return max(self.rank_shares or [self.global_batch_size // world_size]), 1
        per_rank_step, rem = divmod(self.global_batch_size, world_size)
        if rem:
            raise TrainingConfigError(
                "global_batch_size",
                f"{self.global_batch_size} is not divisible by the world size {world_size}",
            )
        if self.micro_batch_size is None:
            micro, rem = divmod(per_rank_step, self.grad_accum_steps)
            if rem or micro < 1:
                raise TrainingConfigError(
                    "grad_accum_steps",
                    f"global_batch_size {self.global_batch_size} over {world_size} rank(s) gives "
                    f"{per_rank_step} samples per rank, which {self.grad_accum_steps} "
                    "accumulation steps do not divide",
                )
            return micro, self.grad_accum_steps
        if self.micro_batch_size * self.grad_accum_steps != per_rank_step:
            raise TrainingConfigError(
                "micro_batch_size",
                f"micro_batch_size {self.micro_batch_size} x grad_accum_steps {self.grad_accum_steps} "
                f"x world size {world_size} must equal global_batch_size {self.global_batch_size}",
            )
        return self.micro_batch_size, self.grad_accum_steps

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump()


def _problems(cls: type[TrainConfig], values: Mapping[str, Any],
              exc: ValidationError) -> list[tuple[str | None, str]]:
    """Every problem of ``values``: each field that could not be read, then the checks across fields.

    The checks also run when some fields could not be read (on the others and
    the defaults), so every problem is reported at once; a field that could
    not be read is not blamed twice.
    """
    problems = [p for err in exc.errors() for p in _from_error(cls, err)]
    unread = {err["loc"][0] for err in exc.errors() if err["loc"]}
    if unread:
        try:
            cls.model_validate({k: v for k, v in values.items() if k not in unread})
        except ValidationError as again:
            problems += [(f, m) for err in again.errors() for f, m in _from_error(cls, err) if f not in unread]
    return problems


def _from_error(cls: type[TrainConfig], err: Any) -> list[tuple[str | None, str]]:
    error = (err.get("ctx") or {}).get("error")
    if isinstance(error, TrainingConfigError):
        return error.problems
    if not err["loc"]:
        return [(None, str(error) if error is not None else err["msg"])]
    field, *rest = err["loc"]
    if err["type"] == "extra_forbidden":
        return [(str(field), f"unknown field; known fields are: {', '.join(sorted(cls.model_fields))}")]
    if error is not None:  # one of this module's own validators
        return [(str(field), str(error))]
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in rest if p not in ("int", "float", "str"))
    msg = err["msg"].replace("Input should be", "must be")
    return [(str(field), f"{where.lstrip('.')}: {msg}, got {err['input']!r}" if where else
             f"{msg}, got {err['input']!r}")]


C = TypeVar("C", bound=TrainConfig)


def resolve_config(config_cls: type[C], values: Mapping[str, Any] | None) -> C:
    """Build ``config_cls`` from plain values (JSON, YAML, ``--set`` strings).

    Unknown fields and values of the wrong type are refused with the field's
    name, so a typo never silently falls back to a default.
    """
    if values is not None and not isinstance(values, Mapping):
        raise TrainingConfigError(None, f"a config is a mapping of field: value, got {type(values).__name__}")
    return config_cls(**dict(values or {}))


def read_config_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML (or JSON) config file into plain values."""
    p = Path(path)
    if not p.is_file():
        raise TrainingConfigError(None, f"config file {p} does not exist")
    try:
        data = yamltext.load(p.read_text()) or {}
    except yaml.YAMLError as exc:
        raise TrainingConfigError(None, f"config file {p} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise TrainingConfigError(None, f"config file {p} must hold a mapping of field: value")
    return data


def parse_overrides(items: Iterable[str]) -> dict[str, Any]:
    """``["max_steps=200", "lr=3e-4"]`` -> values; each value is read as YAML."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise TrainingConfigError(None, f"--set {item!r}: expected FIELD=VALUE, e.g. max_steps=200")
        try:
            out[key] = yamltext.load(raw) if raw.strip() else None
        except yaml.YAMLError:
            out[key] = raw
    return out
