"""How much memory one rank of a training needs: ``estimate_memory_requirement``.

Nothing here is a rule of thumb about model sizes: parameters, gradients,
optimizer states and activations come from tracing the recipe's own model,
loss and three AdamW steps under fake tensors (``memtrace``, planned and cached
by ``memory``), at the per-rank micro-batch and precision the training will use.
The steady state (step 2 on) is where the peak is: AdamW's states exist while
the backward holds activations, their gradients and the parameters' gradients.
What a trace cannot see is added from what the strategy does and what the
device costs:

- DDP keeps a flat copy of every gradient in its communication buckets;
- FSDP keeps 1/world of parameters, gradients and optimizer states, and
  all-gathers the full parameters of the unit it runs;
- the caching allocator: the trace's sequence of allocations and frees, with
  the cuBLAS workspaces, replayed through its rules (``allocator``) gives the
  reserved peak;
- the framework: what the process holds outside the allocator once it has
  trained (CUDA context and kernels), as measured on the fleet's hosts
  (``gpus.context_bytes``, ``context_bytes=``) or a default;
- a margin where the estimate is less sure (``margin`` in the breakdown).

``total`` is thus what NVML will show for the rank's process, the figure a
run measures (``telemetry/procmem.py``). Later runs of the same recipe and
shape correct the allocator part by what they measured (``calibration``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from gpufleet.scheduling.allocator import LT_WORKSPACE
from gpufleet.scheduling.memory import plan_trace, trace_for
from gpufleet.scheduling.types import MiB, fmt_bytes

# Where no host of the fleet has measured them (devices/context_probe.py): what a
# process holds outside the caching allocator once it has trained (the CUDA context
# and the kernels lazy loading brought in; 742 MiB on an H200, driver 580, torch 2.11),
# and the cuBLAS workspace each thread allocates through the allocator at its
# first matmul (32 MiB from Hopper on; 8 MiB before).
CONTEXT_BYTES = {"cuda": 742 * MiB, "hip": 742 * MiB, "xpu": 742 * MiB, "cpu": 0}
WORKSPACE_BYTES = {"cuda": 32 * MiB, "hip": 32 * MiB, "xpu": 32 * MiB, "cpu": 0}
# The margin on the allocator's part of a shape no run has measured. On the reference runs
# (tests/scheduling/data) the replayed reserved peak falls short by 1.1 % at worst (sae topk
# b4096); kernels the trace does not model take their scratch too (topk's radix select held
# 6 MiB there, away from the peak), so the margin stays at the 3 % the replay first needed.
UNMEASURED_MARGIN = 0.03


@dataclass(frozen=True)
class Calibration:
    """What earlier runs of the same key measured: bytes, not ratios to the estimates they had,
    so a newer estimate of the same shape is corrected to what they measured, not by how far
    an older estimate was off."""

    runs: int
    # Median of the runs' measured process memory minus the context each counted: what the
    # caching allocator held.
    allocator_bytes: int
    # The largest run's distance above the median, relative to it: the margin kept.
    spread: float = 0.0


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
    # The context counted in ``framework_overhead`` (measured on the fleet, or the default).
    context_bytes: int = 0
    # What the caching allocator reserves beyond the allocated peak.
    allocator_cache: int = 0
    # The cuBLAS workspaces (the forward's thread and autograd's), inside the allocator.
    blas_workspace: int = 0
    # What CUDA kernels take for themselves while they run (a reduction's staging buffer), by
    # how much it raises the allocated peak.
    kernel_scratch: int = 0
    # Added where the estimate is less sure: a shape never measured, or the spread of its runs.
    margin: int = 0
    # The allocated peak of each traced step (step 1 has no optimizer states yet).
    step_peaks: list[int] = field(default_factory=list)

    @property
    def allocator_bytes(self) -> int:
        """The allocator's part (reserved, uncalibrated, no margin): all but the context."""
        return self.uncalibrated_total - self.context_bytes

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
            "blas_workspace": self.blas_workspace,
            "kernel_scratch": self.kernel_scratch,
            "allocator_cache": self.allocator_cache,
            "framework_overhead": self.framework_overhead,
            "margin": self.margin,
        }

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["summary"] = self.summary()
        d["allocator_bytes"] = self.allocator_bytes
        return d


def check_dataset_size(samples: int | None, micro: int, accum: int, world_size: int) -> None:
    """The launcher's rule, before anything is queued: every rank needs one whole step's samples."""
    from gpufleet.engine.config import TrainingConfigError

    if samples is None:
        return
    per_rank = -(-samples // world_size)  # what DistributedSampler gives each rank
    if per_rank < micro * accum:
        raise TrainingConfigError(
            "global_batch_size",
            f"the dataset has {samples} samples, fewer than one step needs ({micro * accum * world_size} over"
            f" {world_size} rank(s)); use more data or a smaller global_batch_size",
        )


def estimate_memory_requirement(
    recipe: str,
    config: Mapping[str, Any] | Any,
    *,
    world_size: int = 1,
    backend: str = "cuda",
    calibration: Calibration | None = None,
    data_root: Any = None,
    context_bytes: int | None = None,
    workspace_bytes: int | None = None,
) -> MemoryEstimate:
    """Bytes one rank needs to train ``recipe`` with ``config`` on ``world_size`` ranks.

    ``config`` is a dict (resolved by the recipe here, so bad values raise the
    recipe's ``TrainingConfigError`` naming the field) or an already resolved config.
    ``data_root`` is where a config's ``data_path`` lives (the settings'
    ``data_root``); only the shape of one micro-batch is read from it.
    ``context_bytes``: what a process holds outside the caching allocator once it has trained,
    measured on the hosts that will run it (``devices/context_probe.py``); ``workspace_bytes``:
    the cuBLAS workspace each thread allocates there, measured the same way.
    """
    plan = plan_trace(recipe, config, world_size, data_root)
    trace = trace_for(plan, data_root)
    check_dataset_size(trace.dataset_size, plan.micro, plan.accum, world_size)
    parts = _rank_parts(trace, plan.strategy, world_size)
    gpu = backend != "cpu"
    context = (context_bytes if context_bytes is not None else CONTEXT_BYTES.get(backend, 0)) if gpu else 0
    workspace = (workspace_bytes if workspace_bytes is not None else WORKSPACE_BYTES.get(backend, 0)) if gpu else 0
    workspaces = (workspace * len(getattr(trace, "blas_marks", {}) or {})
                  + (LT_WORKSPACE * len(getattr(trace, "lt_marks", {}) or {}) if workspace else 0))
    reserved, scratch = _replayed(trace, parts, plan.strategy, workspace) if gpu else (parts.held, 0)
    cache = max(0, reserved - parts.held - workspaces - scratch)
    # What the caching allocator will reserve; the context comes on top.
    allocator = parts.held + workspaces + scratch + cache
    runs, corrected, spread = 0, allocator, UNMEASURED_MARGIN
    if calibration is not None and calibration.runs > 0 and calibration.allocator_bytes > 0 and allocator > 0:
        runs, corrected, spread = calibration.runs, calibration.allocator_bytes, calibration.spread
    ratio = corrected / allocator if allocator else 1.0
    margin = int(corrected * spread) if gpu else 0
    method = (
        f"traced {len(getattr(trace, 'step_peaks', ()) or ()) or 1} AdamW steps of the recipe's model under fake"
        f" tensors (micro-batch {plan.micro}, {plan.config.precision}, peak in the {parts.peak_phase})"
    )
    if gpu and plan.strategy != "fsdp":
        method += "; reserved memory from the allocation sequence replayed through the CUDA caching allocator"
    method += "".join(f"; {note}" for note in parts.notes)
    if runs:
        method += f"; corrected by {ratio:.2f}x from {runs} measured run(s)"
    if margin:
        method += (f"; {spread:.0%} margin for the "
                   f"{'spread of the measured runs' if runs else 'shape not yet measured'}")
    return MemoryEstimate(
        total=corrected + context + margin,
        parameters=parts.parameters,
        gradients=parts.gradients,
        optimizer_states=parts.states,
        activations=parts.activations,
        temporaries=parts.temporaries,
        ddp_buckets=parts.ddp_buckets,
        framework_overhead=context,
        method=method,
        key=plan.key,
        recipe=recipe,
        strategy=plan.strategy,
        precision=plan.config.precision,
        world_size=world_size,
        backend=backend,
        micro_batch_size=plan.micro,
        parameter_count=trace.parameter_count,
        peak_phase=parts.peak_phase,
        uncalibrated_total=allocator + context,
        calibrated_from=runs,
        calibration_ratio=ratio,
        context_bytes=context,
        allocator_cache=cache,
        blas_workspace=workspaces,
        kernel_scratch=scratch,
        margin=margin,
        step_peaks=[int(x) for x in getattr(trace, "step_peaks", ()) or ()],
    )


def _replayed(trace: Any, parts: _RankParts, strategy: str, workspace: int) -> tuple[int, int]:
    """What the caching allocator reserves at its peak, the trace's allocations replayed through
    it, and how much the kernels' own scratch raises the allocated peak of that replay.

    FSDP's rank holds other tensors than the traced single-device step; its allocated peak is
    scaled by what the replay shows the allocator reserving over allocating for that step, and
    no scratch figure of its own is kept.
    """
    from gpufleet.scheduling.allocator import device_events, replay

    if not getattr(trace, "events", None):
        return parts.held + workspace * 2, 0
    if strategy == "fsdp":
        single = replay(device_events(trace, workspace=workspace))
        return int((parts.held + workspace * 2) * single.peak_reserved / max(1, single.peak_allocated)), 0
    ddp = strategy == "ddp"
    full = replay(device_events(trace, workspace=workspace, ddp=ddp))
    if not getattr(trace, "scratch", None):
        return full.peak_reserved, 0
    without = replay(device_events(trace, workspace=workspace, ddp=ddp, kernels=False))
    return full.peak_reserved, max(0, full.peak_allocated - without.peak_allocated)


@dataclass
class _RankParts:
    """What one rank holds at its peak, by kind, once the strategy has shared it out."""

    peak_phase: str
    parameters: int
    gradients: int
    states: int
    activations: int
    temporaries: int
    ddp_buckets: int
    notes: list[str]

    @property
    def held(self) -> int:
        return (self.parameters + self.gradients + self.states + self.activations + self.temporaries
                + self.ddp_buckets)


def _rank_parts(trace: Any, strategy: str, world_size: int) -> _RankParts:
    ddp = strategy == "ddp"

    def held(ph: Any) -> int:
        # Under DDP (gradient_as_bucket_view) gradients are views into the
        # buckets, which exist for the whole run: count the buckets instead.
        return ph.peak - ph.gradients + trace.gradient_bytes if ddp else ph.peak

    fb, st = trace.forward_backward, trace.optimizer_step
    phase = fb if held(fb) >= held(st) else st
    parts = _RankParts(
        peak_phase="forward/backward" if phase is fb else "optimizer step",
        parameters=phase.parameters + phase.buffers,
        gradients=0 if ddp else phase.gradients,
        states=phase.optimizer_states,
        activations=phase.other + phase.batch if phase is fb else phase.batch,
        temporaries=0 if phase is fb else phase.other,
        ddp_buckets=trace.gradient_bytes if ddp else 0,
        notes=[],
    )
    if ddp:
        parts.notes.append("DDP buckets hold the gradients (gradient_as_bucket_view) for the whole run")
    elif strategy == "fsdp":
        # Sharded state, plus the full parameters of the unit being run.
        parts.parameters = -(-parts.parameters // world_size) + parts.parameters
        parts.gradients = -(-parts.gradients // world_size)
        parts.states = -(-parts.states // world_size)
        parts.notes.append("FSDP: 1/world of parameters, gradients and optimizer states, plus one full all-gather")
    return parts
