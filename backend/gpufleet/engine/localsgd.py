"""Independent training with a merge: each group trains its own replica, the replicas are averaged.

Where ranks cannot share an efficient collective (GPUs of several vendors), each
vendor group trains its own replica on its own shard of the data, and every
H steps (local SGD) and at the end the replicas' parameters are
averaged. Only parameters cross between groups, once per H steps, instead of
gradients every step.

* :func:`average_replicas`: the in-run merge, one all-reduce of the parameters
  among the group leaders (gloo across vendors).
* :func:`merge_states` / :func:`merge_checkpoints`: the merge of finished (or
  paused) replicas' checkpoints into one ordinary ``step-N/`` checkpoint, which
  a training resumes like any other.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from gpufleet.engine import checkpoint as ckpt


def average_replicas(model: nn.Module, group: Any = None) -> None:
    """Replace every parameter (and floating buffer) by its mean over the ranks of ``group``."""
    if not (dist.is_available() and dist.is_initialized()):
        return
    size = dist.get_world_size(group)
    if size < 2:
        return
    tensors = [t for t in list(model.parameters()) + list(model.buffers()) if t.is_floating_point()]
    with torch.no_grad():
        flat = torch.cat([t.detach().reshape(-1) for t in tensors])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group)
        flat /= size
        pos = 0
        for t in tensors:
            t.copy_(flat[pos:pos + t.numel()].view_as(t))
            pos += t.numel()


def merge_states(states: Sequence[Any], weights: Sequence[float] | None = None) -> Any:
    """The weighted mean of equally shaped (nested) states: floating tensors averaged, the rest from the first."""
    if not states:
        raise ValueError("nothing to merge")
    w = [1.0 / len(states)] * len(states) if weights is None else [x / sum(weights) for x in weights]
    if len(w) != len(states):
        raise ValueError(f"{len(states)} states but {len(w)} weights")
    first = states[0]
    if isinstance(first, torch.Tensor):
        if not first.is_floating_point():
            return first
        shapes = {tuple(s.shape) for s in states}
        if len(shapes) > 1:
            raise ValueError(f"replicas disagree on a tensor's shape: {sorted(shapes)}")
        return sum(wi * s.to(torch.float64) for wi, s in zip(w, states)).to(first.dtype)
    if isinstance(first, dict):
        keys = set(first)
        for s in states[1:]:
            if set(s) != keys:
                raise ValueError(f"replicas disagree on their keys: {sorted(map(str, keys ^ set(s)))[:5]}")
        return {k: merge_states([s[k] for s in states], w) for k in first}
    if isinstance(first, (list, tuple)):
        merged = [merge_states([s[i] for s in states], w) for i in range(len(first))]
        return type(first)(merged) if isinstance(first, tuple) else merged
    return first


def merge_checkpoints(paths: Sequence[str | Path], out_dir: str | Path, *, keep: int = 3,
                      weights: Sequence[float] | None = None) -> Path:
    """Average the replicas' checkpoints into an ordinary ``step-N/`` under ``out_dir``.

    Model and optimizer states are averaged (weighted by ``weights``, e.g. each
    group's samples; equal by default); the step is the replicas' common step
    and ``samples_seen`` their sum, so a resumed run counts every sample once.
    """
    if len(paths) < 2:
        raise ValueError("merging needs the checkpoints of at least two replicas")
    loaded = [ckpt.load_checkpoint(p) for p in paths]
    recipes = {s["meta"].get("recipe") for s in loaded}
    if len(recipes) > 1:
        raise ValueError(f"replicas of different recipes cannot be merged: {sorted(map(str, recipes))}")
    steps = {int(s["state"]["step"]) for s in loaded}
    if len(steps) > 1:
        raise ValueError(f"replicas are at different steps {sorted(steps)}; merge at a common step")
    step = steps.pop()
    state = dict(loaded[0]["state"])
    state["samples_seen"] = sum(int(s["state"].get("samples_seen", 0)) for s in loaded)
    meta = {k: v for k, v in loaded[0]["meta"].items() if k not in ("step", "written_at", "files")}
    meta["merged_from"] = [str(p) for p in paths]
    return ckpt.write_checkpoint(
        out_dir, step,
        model_state=merge_states([s["model"] for s in loaded], weights),
        optim_state=merge_states([s["optimizer"] for s in loaded], weights),
        train_state=state, meta=meta, keep=keep,
    )
