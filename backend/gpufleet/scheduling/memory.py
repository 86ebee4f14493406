"""Tracing one training step to see what it holds: the plan of a trace, its size limits, its cache.

:func:`plan_trace` resolves a recipe's config and names its trace (cheap, no
torch); :func:`trace_for` runs the trace (``memtrace``: the recipe's own model,
loss and AdamW step under fake tensors) or takes it from the cache. A model
past :data:`SIZE_LIMITS` is refused before anything is traced.
:mod:`gpufleet.scheduling.estimate` turns a trace into the bytes one rank needs.

Torch is imported only when a trace runs, so the API imports this module freely.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Config fields that change neither shapes nor what a step keeps in memory;
# they are left out of the key that groups runs for calibration.
_NOT_SHAPE = {
    "max_steps", "lr", "seed", "checkpoint_every", "keep_checkpoints", "log_every",
    "warmup_steps", "lr_schedule", "data_path", "weight_decay", "grad_clip",
    "global_batch_size", "micro_batch_size", "grad_accum_steps", "synthetic_samples",
    "synthetic_noise", "l1_coeff", "aux_coeff", "dead_steps",
}


class EstimateError(ValueError):
    """The config cannot be estimated (it cannot even build); says why."""


class EstimateLimitError(EstimateError):
    """The model is beyond what the server agrees to trace; names the limit."""


@dataclass(frozen=True)
class SizeLimits:
    """The largest model a trace is run for (checked on the meta device first, which costs nothing).

    Far beyond any model a recipe config describes for a real GPU fleet, well
    below what would keep a trace busy for minutes.
    """

    layers: int = 1024  # modules with no children (Linear, LayerNorm, …)
    parameters: int = 10**12
    elements: int = 2**36  # in the largest single parameter tensor


SIZE_LIMITS = SizeLimits()


def check_model_size(recipe_obj: Any, config: Any, limits: SizeLimits = SIZE_LIMITS) -> None:
    """Refuse (EstimateLimitError) a model with more layers, parameters or elements than ``limits``."""
    import torch

    with torch.device("meta"):
        model = recipe_obj.build_model(config)
    layers = 0
    for module in model.modules():
        if next(iter(module.children()), None) is None:
            layers += 1
            if layers > limits.layers:
                raise EstimateLimitError(
                    f"the model has more than {limits.layers} layers, the most the server estimates;"
                    " make it smaller"
                )
    count, largest = 0, 0
    for p in model.parameters():
        n = p.numel()
        count += n
        largest = max(largest, n)
    if count > limits.parameters:
        raise EstimateLimitError(
            f"the model has {count:,} parameters, more than the {limits.parameters:,} the server estimates;"
            " make it smaller"
        )
    if largest > limits.elements:
        raise EstimateLimitError(
            f"one of the model's tensors has {largest:,} elements, more than the {limits.elements:,}"
            " the server estimates; make the layer smaller"
        )


def resolve_strategy(strategy: str, world_size: int) -> str:
    if strategy == "fsdp":
        return "fsdp"
    if world_size > 1:
        return "ddp"
    return "single"


def estimate_key(recipe: str, config: Mapping[str, Any], *, micro_batch: int, accum: int,
                 precision: str, strategy: str, world_size: int) -> str:
    """Groups runs whose memory must match: recipe, model shape, batch, precision, strategy."""
    shape = {k: v for k, v in sorted(config.items()) if k not in _NOT_SHAPE}
    digest = hashlib.sha1(json.dumps(shape, sort_keys=True, default=str).encode()).hexdigest()[:10]
    acc = f"x{accum}" if accum > 1 else ""
    return f"{recipe}/mb{micro_batch}{acc}/{precision}/{strategy}{world_size}/{digest}"


# What a trace records, as a number: a trace kept on disk by another one is traced again. 2: the
# kernels' scratch, cuBLASLt's workspace, autograd's in-place sum of gradients.
TRACE_FORMAT = 2

# Traces are deterministic for a key; keep the last few (a queue re-estimates often).
_cache_lock = threading.Lock()
_trace_cache: OrderedDict[str, Any] = OrderedDict()
_CACHE_SIZE = 128


def cached_trace(key: str) -> Any:
    """The trace kept for ``key``, or None."""
    with _cache_lock:
        if key in _trace_cache:
            _trace_cache.move_to_end(key)
            return _trace_cache[key]
    return None


def forget_traces() -> None:
    """Empty this process's cache of traces (as a restart does)."""
    with _cache_lock:
        _trace_cache.clear()


def keep_trace(key: str, trace: Any) -> None:
    """Keep a trace made elsewhere (the estimate pool's process) for ``key``."""
    with _cache_lock:
        _trace_cache[key] = trace
        _trace_cache.move_to_end(key)
        while len(_trace_cache) > _CACHE_SIZE:
            _trace_cache.popitem(last=False)


@dataclass(frozen=True)
class TracePlan:
    recipe_obj: Any
    config: Any
    micro: int
    accum: int
    strategy: str
    key: str  # the calibration key
    trace_key: str  # what the trace depends on: the key and the fields outside it


def plan_trace(recipe: str, config: Mapping[str, Any] | Any, world_size: int, data_root: Any) -> TracePlan:
    """Resolve the config and name its trace; cheap, imports no torch. Raises the recipe's TrainingConfigError."""
    from gpufleet.engine.recipes import get_recipe

    if world_size < 1:
        raise EstimateError(f"world size must be >= 1, got {world_size}")
    recipe_obj = get_recipe(recipe)
    cfg = recipe_obj.resolve_config(dict(config)) if isinstance(config, Mapping) else config
    micro, accum = cfg.batch_layout(world_size)
    strategy = resolve_strategy(cfg.strategy, world_size)
    key = estimate_key(recipe, cfg.to_dict(), micro_batch=micro, accum=accum,
                       precision=cfg.precision, strategy=strategy, world_size=world_size)
    trace_key = key + f"/{cfg.grad_clip}/{cfg.weight_decay}/{cfg.data_path}/{data_root}"
    return TracePlan(recipe_obj, cfg, micro, accum, strategy, key, trace_key)


def trace_for(plan: TracePlan, data_root: Any) -> Any:
    """The step trace of ``plan``: from the cache, else traced here (size limits first)."""
    return _trace(plan.recipe_obj, plan.config, plan.micro, plan.accum, plan.trace_key, data_root)


def _trace(recipe_obj: Any, config: Any, micro: int, accum: int, key: str, data_root: Any) -> Any:
    hit = cached_trace(key)
    if hit is not None:
        return hit
    from gpufleet.scheduling.memtrace import trace_step

    try:
        check_model_size(recipe_obj, config)
    except EstimateLimitError:
        raise
    except ValueError:
        raise  # the recipe's own TrainingConfigError
    except Exception as exc:  # a recipe whose model cannot even build
        raise EstimateError(
            f"cannot build recipe {recipe_obj.name}'s model to measure its memory: {type(exc).__name__}: {exc}"
        ) from exc

    kw = dict(precision=config.precision, accum_steps=accum, grad_clip=config.grad_clip,
              lr=config.lr, weight_decay=config.weight_decay)
    try:
        if getattr(config, "data_path", None) is None:
            # Synthetic data is generated under fake tensors too: nothing is computed.
            trace = trace_step(lambda: recipe_obj.build(config, data_root), micro, **kw)
        else:
            # File loaders cannot run under fake tensors: read one real
            # micro-batch from the file (the model built on the meta device
            # costs nothing), then trace with it. The file is opened once per
            # key (traces are cached); .npy files are memory-mapped.
            import torch

            from gpufleet.scheduling.memtrace import example_batch

            with torch.device("meta"):
                _model, dataset, loss_fn = recipe_obj.build(config, data_root)
            batch = example_batch(dataset, micro)
            trace = trace_step(lambda: (recipe_obj.build_model(config), None, loss_fn), micro,
                               batch=batch, **kw)
            trace = dataclasses.replace(trace, dataset_size=len(dataset))
    except ValueError:
        raise  # the recipe's own TrainingConfigError / BadDataError: it names the field
    except Exception as exc:  # any other failure of a recipe's build or step
        raise EstimateError(
            f"cannot trace recipe {recipe_obj.name} to measure its memory: {type(exc).__name__}: {exc}"
        ) from exc
    keep_trace(key, trace)
    return trace
