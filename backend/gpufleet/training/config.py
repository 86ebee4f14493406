"""The training fields every recipe config shares, and how configs are read.

Torch-free on purpose: the API validates a training request with these classes
before anything is written, and the web app must not import torch.

A recipe config is a dataclass that subclasses :class:`TrainConfig`. It
validates itself in ``__post_init__``: ``check`` adds every problem to a
:class:`Problems` list, and one :class:`ConfigError` names them all, which the
API turns into a 422 listing each field and the CLI into a clear message.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml

PRECISIONS = ("fp32", "bf16", "fp16")
STRATEGIES = ("auto", "ddp", "fsdp")
LR_SCHEDULES = ("constant", "cosine", "linear")
FSDP_SHARDING = ("full_shard", "shard_grad_op")


class ConfigError(ValueError):
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
    def of(cls, problems: list[tuple[str | None, str]]) -> ConfigError:
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

    def extend(self, exc: ConfigError) -> None:
        self.items.extend(exc.problems)

    def positive(self, cfg: Any, *names: str) -> None:
        for name in names:
            value = getattr(cfg, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                self.add(name, f"must be an integer >= 1, got {value!r}")

    def choice(self, cfg: Any, name: str, options: Iterable[str]) -> None:
        value = getattr(cfg, name)
        if value not in options:
            self.add(name, f"must be one of {', '.join(options)}; got {value!r}")

    def raise_if_any(self) -> None:
        if self.items:
            raise ConfigError.of(self.items)


def option(default: Any = dataclasses.MISSING, help: str = "", *,  # noqa: A002 - the form's word
           factory: Any = dataclasses.MISSING) -> Any:
    """A config field with its one-line description (shown by ``GET /recipes`` and the form)."""
    return dataclasses.field(default=default, default_factory=factory, metadata={"help": help})


@dataclass
class TrainConfig:
    """Fields shared by every recipe; the defaults give a sensible short run."""

    max_steps: int = option(200, "optimizer steps to run")
    global_batch_size: int = option(256, "samples per optimizer step, summed over every rank and accumulation step")
    micro_batch_size: int | None = option(
        None, "samples per rank per forward pass; empty = global batch / (ranks x accumulation steps)")
    grad_accum_steps: int = option(1, "forward/backward passes per optimizer step")
    lr: float = option(1e-3, "peak learning rate (AdamW)")
    weight_decay: float = option(0.0, "AdamW weight decay")
    precision: Literal["fp32", "bf16", "fp16"] = option(
        "fp32", "number format of the forward and backward passes (bf16/fp16 use autocast)")
    seed: int = option(0, "random seed for weights and data order; the same seed repeats a run")
    checkpoint_every: int = option(100, "save a checkpoint every this many steps (and at the end)")
    keep_checkpoints: int = option(3, "how many of the newest checkpoints to keep")
    strategy: Literal["auto", "ddp", "fsdp"] = option(
        "auto", "how ranks share the model: ddp replicates it, fsdp shards it; auto picks ddp")
    fsdp_sharding: Literal["full_shard", "shard_grad_op"] = option(
        "full_shard", "FSDP only: shard parameters too (full_shard) or only gradients and optimizer state")
    ddp_bucket_mb: float = option(25.0, "DDP only: MiB of gradients sent per all-reduce bucket")
    grad_clip: float | None = option(1.0, "clip the gradient norm to this; empty = no clipping")
    warmup_steps: int = option(0, "steps of linear learning-rate warm-up from 0")
    lr_schedule: Literal["constant", "cosine", "linear"] = option(
        "constant", "learning rate after warm-up: constant, or decaying to 0 by max_steps")
    # Ranks agree on metrics (and on a stop request) every log_every steps.
    log_every: int = option(10, "report loss and speed (charts, log line) every this many steps")
    data_path: str | None = option(
        None, "a data file under the server's data root; empty = the recipe's synthetic data")
    merge_every: int = option(
        10, "independent training (GPUs of several vendors): average the groups' replicas every this many steps")

    def __post_init__(self) -> None:
        problems = Problems()
        self.check(problems)
        problems.raise_if_any()

    def check(self, p: Problems) -> None:
        """Add every problem of this config to ``p``; recipes extend it."""
        p.positive(self, "max_steps", "global_batch_size", "grad_accum_steps",
                   "checkpoint_every", "keep_checkpoints", "log_every")
        if self.micro_batch_size is not None and self.micro_batch_size < 1:
            p.add("micro_batch_size", f"must be >= 1 or null, got {self.micro_batch_size}")
        if (isinstance(self.grad_accum_steps, int) and self.grad_accum_steps >= 1
                and self.global_batch_size % self.grad_accum_steps):
            p.add("grad_accum_steps",
                  f"{self.grad_accum_steps} does not divide global_batch_size {self.global_batch_size}")
        if not self.lr > 0:
            p.add("lr", f"must be > 0, got {self.lr}")
        if self.weight_decay < 0:
            p.add("weight_decay", f"must be >= 0, got {self.weight_decay}")
        p.choice(self, "precision", PRECISIONS)
        p.choice(self, "strategy", STRATEGIES)
        p.choice(self, "fsdp_sharding", FSDP_SHARDING)
        p.choice(self, "lr_schedule", LR_SCHEDULES)
        if self.grad_clip is not None and not self.grad_clip > 0:
            p.add("grad_clip", f"must be > 0 or null (no clipping), got {self.grad_clip}")
        if not self.ddp_bucket_mb > 0:
            p.add("ddp_bucket_mb", f"must be > 0, got {self.ddp_bucket_mb}")
        if not 0 <= self.warmup_steps <= self.max_steps:
            p.add("warmup_steps", f"must be between 0 and max_steps ({self.max_steps}), got {self.warmup_steps}")
        if not (isinstance(self.merge_every, int) and self.merge_every >= 1):
            p.add("merge_every", f"must be >= 1, got {self.merge_every}")
        if self.data_path is not None and not str(self.data_path).strip():
            p.add("data_path", "must be a path under the data root, or null for synthetic data")

    def batch_layout(self, world_size: int) -> tuple[int, int]:
        """(micro_batch_size per rank, grad_accum_steps) for ``world_size`` ranks.

        The global batch never changes with the layout: that is what lets a run
        move between one and many devices, or halve its micro batch after an
        out-of-memory error, and still compute the same steps.
        """
        if world_size < 1:
            raise ConfigError(None, f"world size must be >= 1, got {world_size}")
        per_rank_step, rem = divmod(self.global_batch_size, world_size)
        if rem:
            raise ConfigError(
                "global_batch_size",
                f"{self.global_batch_size} is not divisible by the world size {world_size}",
            )
        if self.micro_batch_size is None:
            micro, rem = divmod(per_rank_step, self.grad_accum_steps)
            if rem or micro < 1:
                raise ConfigError(
                    "grad_accum_steps",
                    f"global_batch_size {self.global_batch_size} over {world_size} rank(s) gives "
                    f"{per_rank_step} samples per rank, which {self.grad_accum_steps} "
                    "accumulation steps do not divide",
                )
            return micro, self.grad_accum_steps
        if self.micro_batch_size * self.grad_accum_steps != per_rank_step:
            raise ConfigError(
                "micro_batch_size",
                f"micro_batch_size {self.micro_batch_size} x grad_accum_steps {self.grad_accum_steps} "
                f"x world size {world_size} must equal global_batch_size {self.global_batch_size}",
            )
        return self.micro_batch_size, self.grad_accum_steps

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _positive(cfg: Any, *names: str) -> None:
    """Raise at the first of ``names`` that is not an integer >= 1 (for configs without ``check``)."""
    p = Problems()
    p.positive(cfg, *names)
    p.raise_if_any()


def _choice(cfg: Any, name: str, options: Iterable[str]) -> None:
    p = Problems()
    p.choice(cfg, name, options)
    p.raise_if_any()


C = TypeVar("C", bound=TrainConfig)


def resolve_config(config_cls: type[C], values: Mapping[str, Any] | None) -> C:
    """Build ``config_cls`` from plain values (JSON, YAML, ``--set`` strings).

    Unknown fields and values of the wrong type are refused with the field's
    name, so a typo never silently falls back to a default.
    """
    values = dict(values or {})
    hints = typing.get_type_hints(config_cls)
    known = {f.name for f in dataclasses.fields(config_cls) if f.init}
    problems = Problems()
    for name in sorted(set(values) - known):
        problems.add(name, f"unknown field; known fields are: {', '.join(sorted(known))}")
    kwargs: dict[str, Any] = {}
    for name, value in values.items():
        if name not in known:
            continue
        try:
            kwargs[name] = _coerce(name, value, hints[name])
        except ConfigError as exc:
            problems.extend(exc)
    # Validate what could be read too, so every problem is reported at once;
    # a field that could not be read is not blamed twice.
    unread = {f for f, _ in problems.items}
    try:
        cfg = config_cls(**kwargs)
    except ConfigError as exc:
        for field, message in exc.problems:
            if field not in unread:
                problems.add(field, message)
    except (TypeError, ValueError) as exc:  # a validator that raised a plain error
        problems.add(None, str(exc))
    problems.raise_if_any()
    return cfg


def _coerce(name: str, value: Any, hint: Any) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None or (isinstance(value, str) and value.strip().lower() in {"null", "none", "~"}):
            if type(None) in args:
                return None
        inner = [a for a in args if a is not type(None)]
        errors = []
        for a in inner:
            try:
                return _coerce(name, value, a)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(name, f"cannot use {value!r}: " + "; ".join(errors))
    if origin is Literal:
        if value not in args:
            raise ConfigError(name, f"must be one of {', '.join(map(str, args))}; got {value!r}")
        return value
    if origin in (list, tuple):
        if isinstance(value, str):
            value = yaml.safe_load(value) if value.strip().startswith("[") else [
                v for v in value.split(",") if v.strip()
            ]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(name, f"must be a list, got {value!r}")
        item = args[0] if args else Any
        return [_coerce(name, v, item) for v in value]
    if hint is Any:
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in {"true", "yes", "on", "1"}:
            return True
        if isinstance(value, str) and value.strip().lower() in {"false", "no", "off", "0"}:
            return False
        raise ConfigError(name, f"must be true or false, got {value!r}")
    if hint is int:
        if isinstance(value, bool):
            raise ConfigError(name, f"must be an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.strip().replace("_", ""))
            except ValueError:
                pass
        raise ConfigError(name, f"must be an integer, got {value!r}")
    if hint is float:
        if isinstance(value, bool):
            raise ConfigError(name, f"must be a number, got {value!r}")
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(name, f"must be a number, got {value!r}")
    if hint is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(name, f"must be a string, got {value!r}")
    return value


def read_config_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML (or JSON) config file into plain values."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(None, f"config file {p} does not exist")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(None, f"config file {p} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(None, f"config file {p} must hold a mapping of field: value")
    return data


def parse_overrides(items: Iterable[str]) -> dict[str, Any]:
    """``["max_steps=200", "lr=3e-4"]`` -> values; each value is read as YAML."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(None, f"--set {item!r}: expected FIELD=VALUE, e.g. max_steps=200")
        try:
            out[key] = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            out[key] = raw
    return out
