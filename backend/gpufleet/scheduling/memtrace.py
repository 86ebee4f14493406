"""Measure a training step's memory from the real model, without running it.

One optimizer step of the recipe's own model, loss and optimizer runs under
``FakeTensorMode``: every tensor has its real shape and dtype but no storage,
so a model of any size traces in well under a second on the API's CPU. A
dispatch mode on top of it keeps the bytes of every live storage (rounded up
to the CUDA caching allocator's 512-byte blocks, as
``torch.cuda.max_memory_allocated`` counts them) and records the peak and what
was alive at that moment: parameters, gradients, optimizer states, and the
rest (activations saved for backward, autocast weight copies, temporaries).

The same tracker also runs on real tensors, which is how the tests check the
fake trace against a real step on the CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from gpufleet.scheduling.memtracker import BLOCK, MemoryTracker, block_rounded

__all__ = ["BLOCK", "STEPS", "MemoryTracker", "PhasePeak", "StepTrace", "trace_step"]

# Optimizer steps traced: the first creates AdamW's states, the next ones run with them;
# the reference runs (tests/scheduling/data) measure after the third.
STEPS = 3


@dataclass(frozen=True)
class PhasePeak:
    """The peak of one phase of a step and what was alive at that moment (bytes)."""

    peak: int = 0
    parameters: int = 0
    buffers: int = 0
    gradients: int = 0
    optimizer_states: int = 0
    batch: int = 0
    # Everything else: saved activations, autocast weight copies and temporaries
    # in forward/backward; the optimizer's foreach scratch in the step.
    other: int = 0

    @classmethod
    def of(cls, tracker: MemoryTracker) -> PhasePeak:
        c = tracker.peak_by_category
        named = {k: c.get(k, 0) for k in ("parameters", "buffers", "gradients", "optimizer_states", "batch")}
        # "host" tensors (AdamW's step counters) live in host memory on a GPU.
        peak = tracker.peak - c.get("host", 0)
        return cls(peak=peak, other=peak - sum(named.values()), **named)


@dataclass(frozen=True)
class StepTrace:
    """The peaks of forward/backward and of the optimizer step of one rank, at its steady state
    (the step with the highest peak), and the sequence of device allocations of every step."""

    forward_backward: PhasePeak
    optimizer_step: PhasePeak
    parameter_bytes: int
    gradient_bytes: int
    parameter_count: int
    fake: bool
    # What the forward pass left alive for backward (saved activations,
    # autocast weight copies, the loss), measured at the end of the forward.
    forward_saved: int = 0
    # Samples in the recipe's dataset (None when the trace was given a batch).
    dataset_size: int | None = None
    # The allocated peak of each traced step (the first has no optimizer states yet).
    step_peaks: tuple[int, ...] = ()
    # Device allocations (id, bytes) and frees (id, -bytes) in order, from the model and
    # the batch on: what ``allocator.replay`` turns into the reserved peak.
    events: tuple[tuple[int, int], ...] = ()
    # Index in ``events`` where each step ends, and where the first BLAS op of the forward
    # and of the backward ran (each allocates a cuBLAS workspace on a GPU), and the first
    # that runs on cuBLASLt (its own workspace).
    step_ends: tuple[int, ...] = ()
    blas_marks: dict[str, int] = field(default_factory=dict)
    lt_marks: dict[str, int] = field(default_factory=dict)
    # What CUDA kernels allocate while they run: (index in ``events``, bytes of each allocation).
    scratch: tuple[tuple[int, tuple[int, ...]], ...] = ()
    # Allocations that are parameter gradients (views into DDP's buckets under DDP).
    gradient_ids: tuple[int, ...] = ()

    @property
    def peak(self) -> int:
        return max(self.forward_backward.peak, self.optimizer_step.peak)

    @property
    def peak_phase(self) -> str:
        return "forward/backward" if self.forward_backward.peak >= self.optimizer_step.peak else "optimizer step"


def autocast_dtype(precision: str) -> torch.dtype | None:
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)


def example_batch(dataset: Any, n: int) -> Any:
    idx = list(range(min(n, len(dataset))))
    if hasattr(dataset, "__getitems__"):
        batch = dataset.__getitems__(idx)
    else:
        batch = torch.utils.data.default_collate([dataset[i] for i in idx])
    if len(idx) < n:
        from gpufleet.engine.config import TrainingConfigError

        raise TrainingConfigError(
            "global_batch_size",
            f"the dataset has {len(idx)} samples, fewer than one micro-batch of {n};"
            " use more data or a smaller global_batch_size",
        )
    return batch


def trace_step(
    build: Callable[[], tuple[torch.nn.Module, Any, Callable[..., dict[str, Any]]]],
    micro_batch: int,
    *,
    precision: str = "fp32",
    accum_steps: int = 1,
    grad_clip: float | None = None,
    lr: float = 1e-3,
    weight_decay: float = 0.0,
    fake: bool = True,
    batch: Any = None,
    steps: int = STEPS,
) -> StepTrace:
    """Trace ``steps`` optimizer steps of the recipe's model and report the peaks.

    ``build()`` returns ``(model, dataset, loss_fn)`` like ``Recipe.build``.
    AdamW runs with ``foreach=True``, as it does on a GPU by default, so its
    scratch memory is counted. The first step creates the optimizer states;
    from the second on the backward runs while they exist, which is where a
    training's peak usually is, so at least two steps are traced and the
    highest is kept. With ``accum_steps > 1`` two micro-batches run per step:
    the second backward adds to gradients that already exist. ``batch``: a
    real micro-batch to use instead of the dataset's (for data loaders that
    cannot run under fake tensors).
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    fake_mode = FakeTensorMode(allow_non_fake_inputs=True) if fake else None
    tracker = MemoryTracker(scalars=fake)
    if fake_mode is not None:
        fake_mode.__enter__()
    try:
        with tracker:
            model, dataset, loss_fn = build()
            dataset_size = len(dataset) if dataset is not None and hasattr(dataset, "__len__") else None
            params, batch = _tag_model_and_batch(tracker, model, dataset, micro_batch, batch)
            tracker.start_events()
            opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, foreach=True)
            step = partial(_traced_step, tracker, model, params, opt, loss_fn, batch,
                           amp=autocast_dtype(precision), micro_batches=max(1, min(accum_steps, 2)),
                           grad_clip=grad_clip)
            peaks, ends, phases = [], [], (PhasePeak(), PhasePeak(), 0)
            for i in range(max(2, steps)):
                fb, st, saved = step()
                tracker.settle()
                peaks.append(max(fb.peak, st.peak))
                ends.append(len(tracker.events or ()))
                # The steady state: the highest step once AdamW's states exist (step 1 creates
                # them, and its peak counts them as temporaries).
                if i == 1 or (i > 1 and peaks[-1] > max(phases[0].peak, phases[1].peak)):
                    phases = (fb, st, saved)
            param_list = list(model.parameters())
            return StepTrace(
                forward_backward=phases[0],
                optimizer_step=phases[1],
                parameter_bytes=sum(block_rounded(p.numel() * p.element_size()) for p in param_list),
                gradient_bytes=sum(block_rounded(p.numel() * p.element_size()) for p in params),
                parameter_count=sum(p.numel() for p in param_list),
                fake=fake,
                forward_saved=phases[2],
                dataset_size=dataset_size,
                step_peaks=tuple(peaks),
                # Host tensors (AdamW's step counters) stay in the sequence as no-ops, so the
                # marks keep their places.
                events=tuple((e, 0 if e in tracker.host_eids else n) for e, n in tracker.events or ()),
                step_ends=tuple(ends),
                blas_marks=dict(tracker.blas_marks),
                lt_marks=dict(tracker.lt_marks),
                scratch=tuple((pos, tuple(sizes)) for pos, sizes in tracker.scratch),
                gradient_ids=tuple(sorted(tracker.gradient_eids)),
            )
    finally:
        if fake_mode is not None:
            fake_mode.__exit__(None, None, None)


def _tag_model_and_batch(tracker: MemoryTracker, model: torch.nn.Module, dataset: Any, micro_batch: int,
                         batch: Any) -> tuple[list[torch.nn.Parameter], Any]:
    """Tag what the model and one micro-batch hold; the trained parameters and the batch."""
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    tracker.tag(model.parameters(), "parameters")
    tracker.tag(model.buffers(), "buffers")
    for p in params:
        p.register_post_accumulate_grad_hook(lambda q: tracker.tag([q.grad], "gradients"))
    if batch is None:
        batch = example_batch(dataset, micro_batch)
    tracker.tag(tree_flatten(batch)[0], "batch")
    # What else exists now is the dataset and leftovers of building:
    # host memory in a real run (only the batch goes to the device).
    tracker.retag("other", "host")
    return params, batch


def _traced_step(tracker: MemoryTracker, model: torch.nn.Module, params: list[torch.nn.Parameter],
                 opt: torch.optim.Optimizer, loss_fn: Callable[..., dict[str, Any]], batch: Any, *,
                 amp: torch.dtype | None, micro_batches: int,
                 grad_clip: float | None) -> tuple[PhasePeak, PhasePeak, int]:
    """One optimizer step: the forward/backward peak, the optimizer step's peak, and the
    forward's saved activations (what ``other`` holds before the first backward)."""
    tracker.reset_peak()
    forward_saved = 0
    for micro in range(micro_batches):
        if amp is not None:
            with torch.autocast("cpu", dtype=amp):
                out = loss_fn(model, batch)
        else:
            out = loss_fn(model, batch)
        if micro == 0:
            forward_saved = tracker.by_category.get("other", 0)
        out["loss"].backward()
        del out
    if grad_clip:
        torch.nn.utils.clip_grad_norm_(params, grad_clip, foreach=True)
    fb = PhasePeak.of(tracker)
    tracker.reset_peak()
    opt.step()
    st = PhasePeak.of(tracker)
    states = [v for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    # Without capturable/fused, AdamW keeps its step counters on the host.
    tracker.tag([v for v in states if v.dim() == 0], "host")
    tracker.tag([v for v in states if v.dim() > 0], "optimizer_states")
    post_step = getattr(model, "post_step", None)
    if callable(post_step):
        post_step()
    opt.zero_grad(set_to_none=True)
    return fb, st, forward_saved
