"""The learning-rate schedule of a recipe training: warm-up, then constant, linear or cosine decay to the end."""

from __future__ import annotations

import math
from collections.abc import Callable

from gpufleet.engine.config import TrainConfig


def lr_lambda(config: TrainConfig) -> Callable[[int], float]:
    warm, total, kind = config.warmup_steps, config.max_steps, config.lr_schedule

    def f(step: int) -> float:
        if warm and step < warm:
            return (step + 1) / warm
        if kind == "constant":
            return 1.0
        progress = min(1.0, (step - warm) / max(1, total - warm))
        if kind == "linear":
            return 1.0 - progress
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return f
