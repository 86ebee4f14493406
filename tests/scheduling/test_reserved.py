"""The caching allocator's reserve as the estimate models it (memtrace.ReservedModel)."""

from __future__ import annotations

import torch

from gpufleet.scheduling.estimate import estimate_memory_requirement
from gpufleet.scheduling.memtrace import MemoryTracker, ReservedModel

MiB = 2**20


def test_pools_round_to_their_segments_and_keep_freed_blocks() -> None:
    m = ReservedModel()
    m.add(4096)  # small: a 2 MiB segment
    assert m.reserved == 2 * MiB
    m.add(3 * MiB)  # 1-10 MiB: a 20 MiB segment
    assert m.reserved == 22 * MiB
    m.add(11 * MiB + 1)  # large: its own segment, rounded up to 2 MiB
    assert m.reserved == 22 * MiB + 12 * MiB
    m.free(11 * MiB + 1)
    m.add(11 * MiB + 1)  # reuses the cached block
    assert m.reserved == 34 * MiB
    m.free(3 * MiB)
    assert m.reserved == 34 * MiB  # freed blocks stay reserved


def test_a_real_step_reserves_at_least_what_it_allocates() -> None:
    tracker = MemoryTracker()
    tracker.start_reserved()
    with tracker:
        model = torch.nn.Linear(1024, 1024)
        loss = model(torch.randn(64, 1024)).sum()
        loss.backward()
    assert tracker.pools is not None and tracker.pools.reserved >= tracker.peak > 0


def test_the_estimate_counts_the_reserve_on_a_gpu_not_on_a_cpu() -> None:
    cfg = {"in_features": 256, "hidden": [512], "out_features": 10, "global_batch_size": 64}
    gpu = estimate_memory_requirement("mlp", cfg, backend="cuda", context_bytes=900 * MiB)
    cpu = estimate_memory_requirement("mlp", cfg, backend="cpu")
    assert gpu.allocator_cache > 0 and cpu.allocator_cache == 0
    assert gpu.context_bytes == 900 * MiB and gpu.total == gpu.allocator_bytes + 900 * MiB
    assert gpu.breakdown()["allocator_cache"] == gpu.allocator_cache
