"""Speed-proportional batches for ranks of unequal speed (mixed GPU models or vendors).

Each rank gets a micro-batch in proportion to its speed (e.g. 160 and 96 of a
global 256) instead of an equal share, so a slow rank no longer holds every
step back. The update must not change: rank ``r`` computes the mean loss over
its ``b_r`` samples, scales its gradients by ``b_r / B`` and the ranks sum
them, which is exactly the gradient of the mean loss over all ``B`` samples,
the update one process (or equal ranks) would make with the same global batch.

The shares come from given speeds (:func:`proportional_shares`) and are
re-tuned from the measured per-rank step times with a proportional controller
(:func:`retune_shares`); re-tuning belongs at checkpoint boundaries so a
resumed run replays the same shares.

Rank ``r`` takes samples ``[offset_r, offset_r + b_r)`` of each global batch
(:func:`rank_slices`): the ranks together see the samples one process would.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn

from gpufleet.engine.modes import proportional_shares


def retune_shares(shares: Sequence[int], step_times: Sequence[float], gain: float = 0.5) -> list[int]:
    """New shares from each rank's measured time for its current share (a proportional controller).

    A rank's speed is ``share / time``; the target is the proportional split
    of the same global batch at those speeds, and the shares move ``gain`` of
    the way there (1.0 jumps straight to the target). The global batch is kept.
    """
    if len(shares) != len(step_times):
        raise ValueError(f"{len(shares)} shares but {len(step_times)} step times")
    if not 0 < gain <= 1:
        raise ValueError(f"gain must be in (0, 1], got {gain}")
    if any(not t > 0 for t in step_times):
        raise ValueError(f"every step time must be > 0, got {list(step_times)}")
    global_batch = int(sum(shares))
    target = proportional_shares([b / t for b, t in zip(shares, step_times)], global_batch)
    moved = [b + gain * (t - b) for b, t in zip(shares, target)]
    return proportional_shares(moved, global_batch)


def rank_slices(shares: Sequence[int]) -> list[slice]:
    """The slice of each global batch that each rank trains on."""
    out, start = [], 0
    for b in shares:
        out.append(slice(start, start + b))
        start += b
    return out


def weighted_step(model: nn.Module, optimizer: torch.optim.Optimizer,
                  loss_fn: Callable[[nn.Module, torch.Tensor], torch.Tensor],
                  micro_batch: torch.Tensor, global_batch: int,
                  on_local_done: Callable[[float], None] | None = None) -> torch.Tensor:
    """One optimizer step with this rank's micro-batch weighted by its share of ``global_batch``.

    ``loss_fn`` returns the mean loss over the samples it is given. Without an
    initialised process group this is a plain single-process step. Returns
    this rank's (unweighted) loss. ``on_local_done`` is called with the
    seconds this rank's forward and backward took, before the ranks meet.
    """
    t0 = time.perf_counter()
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model, micro_batch)
    (loss * (micro_batch.shape[0] / global_batch)).backward()
    if on_local_done is not None:
        on_local_done(time.perf_counter() - t0)
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        if grads:
            flat = torch.cat([g.reshape(-1) for g in grads])
            dist.all_reduce(flat, op=dist.ReduceOp.SUM)
            pos = 0
            for g in grads:
                g.copy_(flat[pos:pos + g.numel()].view_as(g))
                pos += g.numel()
    optimizer.step()
    return loss.detach()


class ShareTuner:
    """Per-rank micro-batch shares, re-tuned from measured step times only at checkpoint boundaries.

    Ranks :meth:`record` their local step times (the straggler feed's numbers)
    as they go; :meth:`at_checkpoint` turns the mean times since the last
    boundary into new shares and returns them. The shares are part of the
    checkpoint (:meth:`state_dict`), so a resumed run uses exactly the shares
    the interrupted one used after that checkpoint.
    """

    def __init__(self, shares: Sequence[int], gain: float = 0.5) -> None:
        if not shares or any(b < 1 for b in shares):
            raise ValueError(f"every rank needs a share >= 1, got {list(shares)}")
        self.shares = [int(b) for b in shares]
        self.gain = gain
        self._sums = [0.0] * len(shares)
        self._counts = [0] * len(shares)

    @classmethod
    def from_speeds(cls, speeds: Sequence[float], global_batch: int, gain: float = 0.5) -> ShareTuner:
        return cls(proportional_shares(speeds, global_batch), gain)

    def record(self, step_times: Sequence[float]) -> None:
        """One step's local time of every rank (seconds)."""
        if len(step_times) != len(self.shares):
            raise ValueError(f"{len(self.shares)} ranks but {len(step_times)} step times")
        for i, t in enumerate(step_times):
            self._sums[i] += float(t)
            self._counts[i] += 1

    def at_checkpoint(self) -> list[int]:
        """New shares from the times since the last boundary (unchanged without any)."""
        if all(self._counts):
            means = [s / c for s, c in zip(self._sums, self._counts)]
            if all(m > 0 for m in means):
                self.shares = retune_shares(self.shares, means, self.gain)
        self._sums = [0.0] * len(self.shares)
        self._counts = [0] * len(self.shares)
        return list(self.shares)

    def state_dict(self) -> dict:
        return {"shares": list(self.shares), "gain": self.gain}

    def load_state_dict(self, state: dict) -> None:
        shares = [int(b) for b in state["shares"]]
        if len(shares) != len(self.shares) or sum(shares) != sum(self.shares):
            raise ValueError(f"checkpoint shares {shares} do not fit {len(self.shares)} ranks "
                             f"and a global batch of {sum(self.shares)}")
        self.shares, self.gain = shares, float(state.get("gain", self.gain))
        self._sums = [0.0] * len(shares)
        self._counts = [0] * len(shares)
