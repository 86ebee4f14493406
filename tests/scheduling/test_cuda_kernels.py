"""What CUDA kernels allocate for themselves, modelled for the trace (``scheduling/cuda_kernels.py``).

The figures come from an H200 (``data/h200-torch2.11-reductions.jsonl``): for each reference case,
what every reduction of the steady step held while it ran. The trace of the same case, on this CPU,
must give each of them, in order, to the allocator's 512-byte block: the column sums of bias
gradients (128 MiB for a 4096-wide layer at batch 4096, 136 MiB for 16,384 latents), the SAE's
``any`` over the batch (34 MiB), the int64 copy a bool mask's sum reads (128 KiB), and nothing
where the GPU allocated nothing (every case at batch 256).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from gpufleet.scheduling.cuda_kernels import reduce_buffer, reduction_scratch
from gpufleet.scheduling.memory import plan_trace, trace_for

DATA = Path(__file__).parent / "data" / "h200-torch2.11-reductions.jsonl"
CASES = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
MiB = 2**20


def _name(case: dict) -> str:
    recipe, values, batch, precision = case["case"]
    return f"{recipe}-{values.get('variant', '')}-{batch}-{precision}"


@pytest.mark.parametrize("case", CASES, ids=_name)
def test_every_reduction_of_the_steady_step_takes_the_scratch_the_gpu_saw(case: dict) -> None:
    recipe, values, batch, precision = case["case"]
    trace = trace_for(plan_trace(recipe, {**values, "global_batch_size": batch, "precision": precision}, 1,
                                 None), None)
    first, last = trace.step_ends[1], trace.step_ends[2]
    modelled = [sum(sizes) for pos, sizes in trace.scratch if first < pos <= last]
    # Less than a block above the output is the output's own rounding, not the kernel's.
    measured = [held // 512 * 512 for _, held in case["reductions"] if held >= 512]
    print(f"\n{_name(case)}: measured {measured} modelled {modelled}")
    assert modelled == measured


def test_a_column_sum_stages_partial_sums_a_row_sum_does_not() -> None:
    # Bias gradient of a 4096-wide layer at batch 4096: 64 blocks per output, each a warp's 128 outputs.
    assert reduce_buffer([4096, 4096], [4096, 1], [0], 4) == (128 * MiB, 4 * 32)
    # The same tensor summed along its rows: each block reduces its own rows, nothing staged.
    assert reduce_buffer([4096, 4096], [4096, 1], [1], 4) == (0, 0)
    # A batch of 256 leaves each thread too few values to split across blocks.
    assert reduce_buffer([256, 4096], [4096, 1], [0], 4) == (0, 0)
    # A transposed input is reduced along its fastest dimension: the row case.
    assert reduce_buffer([4096, 4096], [1, 4096], [0], 4) == (0, 0)


def test_only_reductions_take_scratch_and_a_bool_sum_reads_an_int64_copy() -> None:
    aten = torch.ops.aten
    grad = torch.empty(4096, 4096, device="meta")
    assert reduction_scratch(aten.sum.dim_IntList, (grad, [0]), {}) == [128 * MiB, 512]
    assert reduction_scratch(aten.mm.default, (grad, grad), {}) == []
    assert reduction_scratch(aten.max.other, (grad, grad), {}) == []  # elementwise, not a reduction
    mask = torch.empty(16384, dtype=torch.bool, device="meta")
    assert reduction_scratch(aten.sum.default, (mask,), {}) == [16384 * 8]
    # bfloat16 summed into float is read as it is, no copy.
    half = torch.empty(4096, 4096, dtype=torch.bfloat16, device="meta")
    assert reduction_scratch(aten.sum.dim_IntList, (half, [0]), {"dtype": torch.float32}) == [128 * MiB, 512]
