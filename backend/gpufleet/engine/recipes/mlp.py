"""The ``mlp`` recipe: a small multilayer perceptron on tabular arrays.

Data: a ``.npy`` matrix whose last ``out_features`` columns (regression) or
last column (classification, integer labels) are the targets, or a
``.safetensors`` / ``.pt`` file with ``x`` and ``y`` tensors. Without a
``data_path`` a seeded synthetic task is generated.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from gpufleet.bounds import MAX_COEFF
from gpufleet.engine.config import PositiveInt, Problems, TrainConfig, option
from gpufleet.engine.recipes import Recipe


class MLPConfig(TrainConfig):
    in_features: PositiveInt = option(16, "input columns per sample")
    out_features: PositiveInt = option(1, "regression targets, or number of classes for classification")
    hidden: list[Annotated[int, Field(ge=1)]] = option(
        help="widths of the hidden layers, e.g. 64,64", factory=lambda: [64, 64])
    task: Literal["regression", "classification"] = option(
        "regression", "regression (MSE on the last out_features columns) or classification (integer labels)")
    activation: Literal["relu", "gelu", "tanh"] = option("relu", "activation between hidden layers")
    x_key: str = option("x", "name of the inputs tensor in a .safetensors / .pt file")
    y_key: str = option("y", "name of the targets tensor in a .safetensors / .pt file")
    synthetic_samples: PositiveInt = option(8192, "samples in the synthetic task (used when data_path is empty)")
    synthetic_noise: float = option(0.05, "noise added to the synthetic targets", ge=0, le=MAX_COEFF)

    def check(self, p: Problems) -> None:
        super().check(p)
        if self.task == "classification" and self.out_features < 2:
            p.add("out_features", "classification needs at least 2 classes")


def _build_model(config: MLPConfig):
    from gpufleet.engine.recipes.mlp_model import MLP

    return MLP(config.in_features, config.hidden, config.out_features, config.activation)


def _build(config: MLPConfig, data_root: str | Path | None):
    from gpufleet.engine.recipes.mlp_model import make_dataset, make_loss_fn

    return _build_model(config), make_dataset(config, data_root), make_loss_fn(config)


RECIPE = Recipe(
    name="mlp",
    config_cls=MLPConfig,
    build_fn=_build,
    build_model_fn=_build_model,
    loss_parts=("mse", "cross_entropy", "accuracy"),
    description="multilayer perceptron for regression or classification on tabular arrays",
)
