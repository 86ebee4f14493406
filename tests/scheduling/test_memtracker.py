"""The trace's tracker counts what autograd does on a GPU, where it differs from a traced step.

autograd adds a tensor's second gradient to its first in place when nothing else holds the
first (``InputBuffer::accumulate``), as it does on a GPU; under a dispatch mode, and always for
fake tensors, it adds out of place. The tracker counts the sum as the first gradient's storage
when the first dies with it, and as a storage of its own when something keeps the first.
"""

from __future__ import annotations

from contextlib import nullcontext

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from gpufleet.scheduling.memtracker import MemoryTracker

N = 256
SIZE = N * N * 4
KEPT: list[torch.Tensor] = []


class _Triple(torch.autograd.Function):
    """h * 3, whose backward keeps the gradient it passes on (as a hook that logs it would)."""

    @staticmethod
    def forward(ctx, h):
        return h * 3

    @staticmethod
    def backward(ctx, grad):
        out = grad * 3
        KEPT.append(out)
        return out


def _backward_allocations(keep: bool, fake: bool) -> tuple[int, int]:
    """(allocations of one activation's size in the backward, the tracker's peak over it)."""
    KEPT.clear()
    with FakeTensorMode() if fake else nullcontext():
        tracker = MemoryTracker()
        with tracker:
            w = torch.randn(N, N, requires_grad=True)
            h = w * 2
            a = _Triple.apply(h) if keep else h * 3
            b = _Triple.apply(h) if keep else h * 5
            loss = a.sum() + b.sum()
            tracker.start_events()
            start = len(tracker.events or ())
            tracker.reset_peak()
            before = tracker.current
            loss.backward()
            peak = tracker.peak - before
        del w, h, a, b, loss
    KEPT.clear()
    return sum(1 for _, n in (tracker.events or ())[start:] if n == SIZE), peak


@pytest.mark.parametrize("fake", [True, False], ids=["fake", "real"])
def test_a_second_gradient_is_summed_in_place_when_nothing_keeps_the_first(fake: bool) -> None:
    allocations, peak = _backward_allocations(keep=False, fake=fake)
    # h's gradient from a, the one from b (added into the first), w's: three, never four.
    assert allocations == 3
    # At most the two gradients of h and w's at once, never a separate sum beside them.
    assert peak <= 2 * SIZE + 4096


@pytest.mark.parametrize("fake", [True, False], ids=["fake", "real"])
def test_a_kept_first_gradient_makes_the_sum_a_storage_of_its_own(fake: bool) -> None:
    allocations, peak = _backward_allocations(keep=True, fake=fake)
    # Both gradients of h are kept, so autograd's sum of them is a third; then w's.
    assert allocations == 4
    assert peak >= 3 * SIZE


class _Twice(torch.autograd.Function):
    """h * 5, whose backward adds two gradients it made itself: an add of a formula, never in place."""

    @staticmethod
    def forward(ctx, h):
        return h * 5

    @staticmethod
    def backward(ctx, grad):
        a, b = grad * 2, grad * 3
        return a + b


@pytest.mark.parametrize("fake", [True, False], ids=["fake", "real"])
def test_an_add_inside_a_backward_formula_is_a_storage_of_its_own(fake: bool) -> None:
    with FakeTensorMode() if fake else nullcontext():
        tracker = MemoryTracker()
        with tracker:
            w = torch.randn(N, N, requires_grad=True)
            loss = _Twice.apply(w * 2).sum()
            tracker.start_events()
            start = len(tracker.events or ())
            loss.backward()
    # a, b, their sum, then w's gradient: the sum is counted although a dies right after it.
    assert sum(1 for _, n in (tracker.events or ())[start:] if n == SIZE) == 4
