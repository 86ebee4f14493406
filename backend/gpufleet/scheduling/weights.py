"""Relative speed weights for the GPUs of a selection (the seed's load-balancing weights).

The seed weighted GPUs by VRAM and a vendor factor; memory size says little
about speed (a 48 GB A6000 is slower than a 24 GB 4090 for training). Here a
weight comes, in order of preference, from:

1. measured step times: how fast gpufleet has seen this GPU model train
   (``measured``: model name -> samples per second per GPU, from
   ``training_metrics.rank_step_times``);
2. the device's specification: dense BF16/FP16 tensor throughput of known models;
3. for unknown models, a rough figure from the compute capability.

Weights are normalised to sum to 1, so ``weights[i] * global_batch`` is the
share of a batch GPU i can take in the time the others take theirs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpufleet.scheduling.types import GPUAvailability

# Dense BF16/FP16 tensor TFLOPS from the vendors' data sheets (no sparsity).
SPEC_TFLOPS: dict[str, float] = {
    "H200": 989.0,
    "H100": 989.0,
    "GH200": 989.0,
    "B200": 2250.0,
    "L40S": 362.0,
    "L40": 181.0,
    "L4": 121.0,
    "A100": 312.0,
    "A40": 150.0,
    "A30": 165.0,
    "A10": 125.0,
    "A6000": 155.0,
    "RTX4090": 165.0,
    "RTX3090": 71.0,
    "V100": 125.0,
    "T4": 65.0,
    "MI300X": 1307.0,
    "MI250X": 383.0,
    "MI210": 181.0,
    "RX7900XTX": 123.0,
    "A770": 138.0,
    "MAX1550": 832.0,
}
# When the model is unknown: a guess from the architecture generation.
_CC_TFLOPS = {"7": 100.0, "8": 150.0, "9": 900.0, "10": 2000.0}
_DEFAULT_TFLOPS = 60.0


def _norm(name: str) -> str:
    return re.sub(r"[^A-Z0-9]", "", name.upper())


def spec_tflops(name: str, compute_capability: str | None = None) -> float | None:
    """Known dense tensor throughput for a GPU model name, or None."""
    key = _norm(name)
    # Longest match first so "L40S" is not read as "L40" or "L4".
    for model in sorted(SPEC_TFLOPS, key=len, reverse=True):
        if _norm(model) in key:
            return SPEC_TFLOPS[model]
    if compute_capability:
        return _CC_TFLOPS.get(compute_capability.split(".")[0])
    return None


@dataclass(frozen=True)
class SpeedWeight:
    weight: float
    source: str  # measured | spec | default


def speed_weights(
    gpus: Sequence[GPUAvailability], measured: Mapping[str, float] | None = None
) -> list[SpeedWeight]:
    """Weights (sum 1) with where each came from.

    Measured figures win, but they are only comparable with each other: when
    some GPUs of the selection have measurements and others not, the
    specification is used for all of them.
    """
    if not gpus:
        return []
    measured = measured or {}
    if all(measured.get(g.name, 0) > 0 for g in gpus):
        raw = [float(measured[g.name]) for g in gpus]
        sources = ["measured"] * len(gpus)
    else:
        raw, sources = [], []
        for g in gpus:
            tf = spec_tflops(g.name, g.compute_capability)
            raw.append(tf if tf is not None else _DEFAULT_TFLOPS)
            sources.append("spec" if tf is not None else "default")
    total = sum(raw)
    return [SpeedWeight(r / total, s) for r, s in zip(raw, sources)]


def selection_weights(
    gpus: Sequence[GPUAvailability], measured: Mapping[str, float] | None = None
) -> tuple[float, ...]:
    return tuple(round(w.weight, 4) for w in speed_weights(gpus, measured))
