"""The estimate against a real GPU: what NVML says the rank's process holds.

Runs only where CUDA is present (skipped elsewhere; `gpufleet doctor` runs it
on a GPU host). Each case is measured in a fresh process, as a training's rank
runs (``scheduling/measured_step.py``): NVML's used memory for the process and
the allocator's peaks, after step 1 and after step 3 (the steady state). The
estimate is given the context as the host's agent measures it in production
(``devices/context_probe.py``, run once for the module) and compared with the
steady-state figure: at most 2 % under, at most 5 % over. Both steps' figures
are printed; the doctor's table reads them back.
"""

from __future__ import annotations

import pytest
import torch

from gpufleet.commands.doctor_checks import ESTIMATE_OVER, ESTIMATE_UNDER, estimate_line
from gpufleet.scheduling.estimate import estimate_memory_requirement
from gpufleet.scheduling.measured_step import measure_case
from gpufleet.engine.recipes import get_recipe

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

CASES = [
    ("sae", {"d_in": 768, "n_latents": 16384, "variant": "topk"}),
    ("sae", {"d_in": 768, "n_latents": 16384, "variant": "relu"}),
    ("mlp", {"in_features": 256, "hidden": [4096, 4096], "task": "classification", "out_features": 100}),
]


@pytest.fixture(scope="module")
def host_context() -> int:
    """The context the agent's probe measures for this GPU model (NVML index 0, as
    ``cuda:0`` is on a host without CUDA_VISIBLE_DEVICES)."""
    import pynvml

    from gpufleet.devices.context_probe import probe_one

    context = probe_one(pynvml, 0)
    if context is None:
        pytest.skip("the context probe could not measure this GPU (the driver does not report its process)")
    return context


@pytest.mark.parametrize(("recipe", "values"), CASES)
@pytest.mark.parametrize("batch", [256, 4096])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_estimate_is_never_under_the_measured_steady_state(recipe: str, values: dict, batch: int,
                                                               precision: str, host_context: int) -> None:
    r = get_recipe(recipe)
    cfg = r.resolve_config({**values, "global_batch_size": batch, "precision": precision})
    est = estimate_memory_requirement(recipe, cfg, backend="cuda", context_bytes=host_context)
    said = measure_case(recipe, values, batch, precision)
    if "skip" in said:
        pytest.skip(said["skip"])
    first, steady = said["step1"], said["step3"]
    measured = steady["nvml"]
    signed = (est.total - measured) / measured
    detail = (f"context {host_context}; step 1: allocated {first['max_allocated']}, reserved "
              f"{first['max_reserved']}; step 3: allocated {steady['max_allocated']}, reserved "
              f"{steady['max_reserved']}")
    # One line per case, read by `gpufleet doctor` into its table.
    print("\n" + estimate_line(recipe, values, batch, precision, est.total, measured, detail,
                               first_step=first["nvml"]))
    assert -ESTIMATE_UNDER <= signed <= ESTIMATE_OVER
