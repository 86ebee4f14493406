"""The CUDA caching allocator as the estimate replays it (scheduling/allocator.py), rule by rule."""

from __future__ import annotations

from gpufleet.scheduling.allocator import LT_WORKSPACE, CachingAllocator, replay, round_size
from gpufleet.scheduling.estimate import estimate_memory_requirement

MiB = 2**20


def test_requests_are_rounded_and_small_ones_share_2_mib_segments() -> None:
    assert (round_size(1), round_size(512), round_size(513)) == (512, 512, 1024)
    a = CachingAllocator()
    blocks = [a.malloc(4096) for _ in range(3)]
    assert a.reserved == 2 * MiB and a.pools[True].segments == 1
    assert a.allocated == 3 * 4096
    a.malloc(1 * MiB)  # still small (<= 1 MiB), and it fits the same segment
    assert a.reserved == 2 * MiB
    a.malloc(1 * MiB)  # the first segment has no room left: a second one
    assert a.reserved == 4 * MiB and a.pools[True].segments == 2
    a.free(blocks[1])
    assert a.reserved == 4 * MiB  # freed blocks stay cached


def test_mid_requests_split_a_20_mib_segment_and_large_ones_round_to_2_mib() -> None:
    a = CachingAllocator()
    x = a.malloc(3 * MiB)
    assert a.reserved == 20 * MiB
    a.malloc(3 * MiB)  # the 17 MiB left of the same segment
    assert a.reserved == 20 * MiB and a.pools[False].segments == 1
    a.malloc(15 * MiB + 1)  # >= 10 MiB and more than the 14 MiB left: its own segment, rounded to 2 MiB
    assert a.reserved == 36 * MiB
    a.free(x)
    a.malloc(2 * MiB)  # best fit: the freed 3 MiB block, split (1 MiB left is not > 1 MiB: not split)
    assert a.reserved == 36 * MiB
    # The whole 3 MiB block is handed out and counted, as max_memory_allocated counts it.
    assert a.allocated == 3 * MiB + 3 * MiB + 16 * MiB


def test_freed_neighbours_merge_so_a_larger_request_reuses_them() -> None:
    a = CachingAllocator()
    first, second = a.malloc(6 * MiB), a.malloc(6 * MiB)
    a.free(first)
    a.free(second)
    a.malloc(12 * MiB + 512)  # would need a new segment had the two freed blocks not merged
    # 20 MiB segment holds 6+6 merged with the 8 MiB tail: 20 MiB free block, fits 12.5 MiB.
    assert a.reserved == 20 * MiB


def test_replay_of_an_event_sequence_gives_peaks_and_segments() -> None:
    r = replay([(1, 30 * MiB), (2, 100), (1, -30 * MiB), (3, 30 * MiB), (4, 0)])
    assert r.peak_reserved == 30 * MiB + 2 * MiB  # the second 30 MiB reuses the first's segment
    assert (r.small_segments, r.large_segments) == (1, 1)
    assert r.peak_allocated == 30 * MiB + 512


def test_the_estimate_counts_the_reserve_and_workspaces_on_a_gpu_not_on_a_cpu() -> None:
    cfg = {"in_features": 256, "hidden": [512], "out_features": 10, "global_batch_size": 64}
    gpu = estimate_memory_requirement("mlp", cfg, backend="cuda", context_bytes=900 * MiB, workspace_bytes=8 * MiB)
    cpu = estimate_memory_requirement("mlp", cfg, backend="cpu")
    assert gpu.allocator_cache > 0 and cpu.allocator_cache == 0
    # One cuBLAS workspace for the forward's thread, one for autograd's; the forward's linear
    # layers (addmm with a bias) run on cuBLASLt, which takes its own 1 MiB.
    assert gpu.blas_workspace == 16 * MiB + LT_WORKSPACE and cpu.blas_workspace == 0
    assert gpu.context_bytes == 900 * MiB
    assert gpu.total == gpu.allocator_bytes + 900 * MiB + gpu.margin and gpu.margin > 0
    assert gpu.total == sum(gpu.breakdown().values())


def test_the_kernels_scratch_at_the_peak_is_its_own_part_of_the_breakdown() -> None:
    """The bias gradients' column sums of a 4096-wide mlp at batch 4096 stage 128 MiB (and a
    512-byte semaphore block) at the allocated peak, as an H200 showed; at batch 256 nothing."""
    cfg = {"in_features": 256, "hidden": [4096, 4096], "out_features": 100, "task": "classification"}
    big = estimate_memory_requirement("mlp", {**cfg, "global_batch_size": 4096}, backend="cuda")
    small = estimate_memory_requirement("mlp", {**cfg, "global_batch_size": 256}, backend="cuda")
    cpu = estimate_memory_requirement("mlp", {**cfg, "global_batch_size": 4096}, backend="cpu")
    assert big.kernel_scratch == 128 * MiB + 512
    assert small.kernel_scratch == 0 and cpu.kernel_scratch == 0
    assert big.total == sum(big.breakdown().values()) and "kernel_scratch" in big.breakdown()
