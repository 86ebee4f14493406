"""How much memory one rank of a training needs: ``estimate_memory_requirement``.

Nothing here is a rule of thumb about model sizes: parameters, gradients,
optimizer states and activations come from tracing the recipe's own model,
loss and AdamW step under fake tensors (``memtrace``), at the per-rank
micro-batch and precision the training will use. What a trace cannot see is
added from what the strategy does and what the device costs:

- DDP keeps a flat copy of every gradient in its communication buckets;
- FSDP keeps 1/world of parameters, gradients and optimizer states, and
  all-gathers the full parameters of the unit it runs;
- the framework: the CUDA/ROCm context (outside ``max_memory_allocated``) and
  the BLAS workspace.

Later runs of the same recipe and shape correct the figure by what they
measured (``calibration``).

Torch is imported only when a trace runs, so the API imports this module freely.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from gpufleet.scheduling.types import MiB, fmt_bytes

# Device memory that a process takes before the first tensor: the CUDA
# context with lazy module loading (CUDA 12) and the cuBLAS/cuBLASLt workspaces
# that PyTorch allocates on the first matmul. Calibration corrects both.
CONTEXT_BYTES = {"cuda": 500 * MiB, "hip": 600 * MiB, "xpu": 600 * MiB, "cpu": 0}
WORKSPACE_BYTES = {"cuda": 33 * MiB, "hip": 33 * MiB, "xpu": 16 * MiB, "cpu": 0}

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


@dataclass(frozen=True)
class Calibration:
    """What earlier runs of the same key measured, relative to their estimates."""

    runs: int
    # Median of measured allocator peak / estimated allocator peak.
    ratio: float


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one rank needs, and where they go. ``total`` is what to reserve."""

    total: int
    parameters: int
    gradients: int
    optimizer_states: int
    activations: int
    # Optimizer foreach scratch / backward temporaries alive at the peak.
    temporaries: int
    ddp_buckets: int
    framework_overhead: int
    method: str
    key: str
    recipe: str
    strategy: str
    precision: str
    world_size: int
    backend: str
    micro_batch_size: int
    parameter_count: int
    peak_phase: str
    # The estimate before calibration (allocator part + overhead).
    uncalibrated_total: int
    calibrated_from: int = 0
    calibration_ratio: float = 1.0

    @property
    def allocator_bytes(self) -> int:
        """What ``torch.cuda.max_memory_allocated`` should show: all but the context."""
        return self.uncalibrated_total - CONTEXT_BYTES.get(self.backend, 0)

    def summary(self) -> str:
        text = f"estimated {fmt_bytes(self.total)} per rank"
        if self.calibrated_from:
            runs = "run" if self.calibrated_from == 1 else "runs"
            text += f", calibrated from {self.calibrated_from} {runs}"
        return text

    def breakdown(self) -> dict[str, int]:
        return {
            "parameters": self.parameters,
            "gradients": self.gradients,
            "optimizer_states": self.optimizer_states,
            "activations": self.activations,
            "temporaries": self.temporaries,
            "ddp_buckets": self.ddp_buckets,
            "framework_overhead": self.framework_overhead,
        }

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["summary"] = self.summary()
        d["allocator_bytes"] = self.allocator_bytes
        return d


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


# Traces are deterministic for a key; keep the last few (a queue re-estimates often).
_cache_lock = threading.Lock()
_trace_cache: OrderedDict[str, Any] = OrderedDict()
_CACHE_SIZE = 128


def check_dataset_size(samples: int | None, micro: int, accum: int, world_size: int) -> None:
    """The launcher's rule, before anything is queued: every rank needs one whole step's samples."""
    from gpufleet.training.config import TrainingConfigError

    if samples is None:
        return
    per_rank = -(-samples // world_size)  # what DistributedSampler gives each rank
    if per_rank < micro * accum:
        raise TrainingConfigError(
            "global_batch_size",
            f"the dataset has {samples} samples, fewer than one step needs ({micro * accum * world_size} over"
            f" {world_size} rank(s)); use more data or a smaller global_batch_size",
        )


def cached_trace(key: str) -> Any:
    """The trace kept for ``key``, or None."""
    with _cache_lock:
        if key in _trace_cache:
            _trace_cache.move_to_end(key)
            return _trace_cache[key]
    return None


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
    from gpufleet.training.recipes import get_recipe

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
    except Exception as exc:  # noqa: BLE001 - a recipe whose model cannot even build
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

            from gpufleet.scheduling.memtrace import _example_batch

            with torch.device("meta"):
                _model, dataset, loss_fn = recipe_obj.build(config, data_root)
            batch = _example_batch(dataset, micro)
            trace = trace_step(lambda: (recipe_obj.build_model(config), None, loss_fn), micro,
                               batch=batch, **kw)
            trace = dataclasses.replace(trace, dataset_size=len(dataset))
    except ValueError:
        raise  # the recipe's own TrainingConfigError / BadDataError: it names the field
    except Exception as exc:  # noqa: BLE001 - any other failure of a recipe's build or step
        raise EstimateError(
            f"cannot trace recipe {recipe_obj.name} to measure its memory: {type(exc).__name__}: {exc}"
        ) from exc
    keep_trace(key, trace)
    return trace


def estimate_memory_requirement(
    recipe: str,
    config: Mapping[str, Any] | Any,
    *,
    world_size: int = 1,
    backend: str = "cuda",
    calibration: Calibration | None = None,
    data_root: Any = None,
) -> MemoryEstimate:
    """Bytes one rank needs to train ``recipe`` with ``config`` on ``world_size`` ranks.

    ``config`` is a dict (resolved by the recipe here, so bad values raise the
    recipe's ``TrainingConfigError`` naming the field) or an already resolved config.
    ``data_root`` is where a config's ``data_path`` lives (the settings'
    ``data_root``); only the shape of one micro-batch is read from it.
    """
    plan = plan_trace(recipe, config, world_size, data_root)
    cfg, micro, strategy, key = plan.config, plan.micro, plan.strategy, plan.key
    trace = trace_for(plan, data_root)
    check_dataset_size(trace.dataset_size, micro, plan.accum, world_size)

    ddp = strategy == "ddp"

    def held(ph: Any) -> int:
        # Under DDP (gradient_as_bucket_view) gradients are views into the
        # buckets, which exist for the whole run: count the buckets instead.
        return ph.peak - ph.gradients + trace.gradient_bytes if ddp else ph.peak

    fb, st = trace.forward_backward, trace.optimizer_step
    phase = fb if held(fb) >= held(st) else st
    peak_phase = "forward/backward" if phase is fb else "optimizer step"
    parameters = phase.parameters + phase.buffers
    gradients = 0 if ddp else phase.gradients
    states = phase.optimizer_states
    if phase is fb:
        activations, temporaries = phase.other + phase.batch, 0
    else:
        activations, temporaries = phase.batch, phase.other

    ddp_buckets = trace.gradient_bytes if ddp else 0
    notes = []
    if ddp:
        notes.append("DDP buckets hold the gradients (gradient_as_bucket_view) for the whole run")
    elif strategy == "fsdp":
        # Sharded state, plus the full parameters of the unit being run.
        full = parameters
        parameters = -(-parameters // world_size) + full
        gradients = -(-gradients // world_size)
        states = -(-states // world_size)
        notes.append("FSDP: 1/world of parameters, gradients and optimizer states, plus one full all-gather")
    context = CONTEXT_BYTES.get(backend, 0)
    overhead = context + WORKSPACE_BYTES.get(backend, 0)

    # What the caching allocator will count (max_memory_allocated); the
    # context comes on top and is not what runs are calibrated on.
    allocator = parameters + gradients + states + activations + temporaries + ddp_buckets + overhead - context
    uncalibrated = allocator + context
    total = uncalibrated
    runs, ratio = 0, 1.0
    if calibration is not None and calibration.runs > 0 and calibration.ratio > 0:
        runs, ratio = calibration.runs, calibration.ratio
        total = int(allocator * ratio) + context
    method = (
        "traced one AdamW step of the recipe's model under fake tensors "
        f"(micro-batch {micro}, {cfg.precision}, peak in the {peak_phase})"
    )
    if notes:
        method += "; " + "; ".join(notes)
    if runs:
        method += f"; corrected by {ratio:.2f}x from {runs} measured run(s)"
    return MemoryEstimate(
        total=total,
        parameters=parameters,
        gradients=gradients,
        optimizer_states=states,
        activations=activations,
        temporaries=temporaries,
        ddp_buckets=ddp_buckets,
        framework_overhead=overhead,
        method=method,
        key=key,
        recipe=recipe,
        strategy=strategy,
        precision=cfg.precision,
        world_size=world_size,
        backend=backend,
        micro_batch_size=micro,
        parameter_count=trace.parameter_count,
        peak_phase=peak_phase,
        uncalibrated_total=uncalibrated,
        calibrated_from=runs,
        calibration_ratio=ratio,
    )
