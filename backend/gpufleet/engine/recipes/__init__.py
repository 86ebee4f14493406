"""The recipe registry.

A recipe is a name, a config model (pydantic) that validates itself, and
``build(config, data_root=None) -> (model, dataset, loss_fn)``. Recipes come
from the ``gpufleet.recipes`` entry-point group (the built-in ``sae`` and
``mlp`` are declared there too), so a training request names a recipe and
never carries code.

This module and each recipe's config module are torch-free: the API resolves
configs without importing torch. ``build`` imports torch when it runs.

``loss_fn(model, batch) -> dict`` runs the forward pass and returns ``loss``
(the tensor to minimise) and its parts (detached tensors), so the loop stays
the same for every recipe.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from gpufleet.engine.config import TrainConfig, TrainingConfigError, resolve_config

ENTRY_POINT_GROUP = "gpufleet.recipes"


class UnknownRecipeError(TrainingConfigError):
    def __init__(self, name: str, known: list[str]):
        super().__init__("recipe", f"unknown recipe {name!r}; installed recipes: {', '.join(known) or 'none'}")


@dataclass(frozen=True)
class Recipe:
    name: str
    config_cls: type[TrainConfig]
    # build(config, data_root) -> (model, dataset, loss_fn)
    build_fn: Callable[..., tuple[Any, Any, Callable[..., dict[str, Any]]]]
    # build_model(config) -> model; cheap, and works under `with torch.device("meta")`.
    build_model_fn: Callable[[Any], Any]
    # Names of the loss parts the loss dict carries besides "loss".
    loss_parts: tuple[str, ...] = ()
    description: str = ""
    # Optional: evaluate(model, dataset, config) -> dict of quality metrics.
    evaluate_fn: Callable[..., dict[str, float]] | None = field(default=None, compare=False)

    def resolve_config(self, values: Mapping[str, Any] | None = None) -> TrainConfig:
        return resolve_config(self.config_cls, values)

    def build(self, config: TrainConfig, data_root: str | Path | None = None):
        if not isinstance(config, self.config_cls):
            raise TrainingConfigError(None, f"recipe {self.name} needs a {self.config_cls.__name__}")
        return self.build_fn(config, data_root)

    def build_model(self, config: TrainConfig):
        return self.build_model_fn(config)


def _discover() -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


@lru_cache(maxsize=None)
def get_recipe(name: str) -> Recipe:
    """The recipe registered under ``name`` in the ``gpufleet.recipes`` group."""
    eps = _discover()
    if name not in eps:
        raise UnknownRecipeError(name, sorted(eps))
    recipe = eps[name].load()
    if not isinstance(recipe, Recipe):
        raise TrainingConfigError("recipe", f"entry point {name!r} does not point at a gpufleet Recipe")
    return recipe


def recipe_names() -> list[str]:
    return sorted(_discover())
