"""Recipes resource: every installed recipe and the fields of its config.

Read from the recipe registry and the config models, so a recipe installed
from another package shows up with the defaults the server will use. Torch-free:
it never builds a recipe.
"""

from __future__ import annotations

import logging
import math
import types
import typing
from typing import Any, Literal

from fastapi import APIRouter

from gpufleet.api.deps import CurrentUser
from gpufleet.wire.recipes import FieldKind, RecipeFieldPublic, RecipePublic, RecipesPublic
from gpufleet.engine import recipes as registry
from gpufleet.engine.config import TrainConfig

log = logging.getLogger(__name__)

router = APIRouter(prefix="/api/v1/recipes", tags=["recipes"])


def _json_default(value: Any) -> Any:
    """A field's default as a JSON value; null where it has none or JSON cannot carry it."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (list, tuple)):
        items = [_json_default(v) for v in value]
        return items if all(v is not None and not isinstance(v, list) for v in items) else None
    return str(value)


def _kind(hint: Any) -> tuple[FieldKind, list[str] | None, bool]:
    """(kind, choices, optional) of a config field's annotation."""
    optional = False
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        optional = type(None) in args
        inner = [a for a in args if a is not type(None)]
        # A union of several types is entered as text; the server coerces it.
        hint = inner[0] if len(inner) == 1 else str
    origin = typing.get_origin(hint)
    if origin is Literal:
        return "choice", [str(a) for a in typing.get_args(hint)], optional
    if origin in (list, tuple) and all(a in (int, Ellipsis) for a in typing.get_args(hint)):
        return "int-list", None, optional
    if hint is bool:
        return "bool", None, optional
    if hint is int:
        return "int", None, optional
    if hint is float:
        return "float", None, optional
    return "text", None, optional


def _fields(config_cls: type[TrainConfig]) -> list[RecipeFieldPublic]:
    hints = typing.get_type_hints(config_cls)
    out = []
    for name, info in config_cls.model_fields.items():
        kind, choices, optional = _kind(hints[name])
        default = info.get_default(call_default_factory=True)
        out.append(RecipeFieldPublic(
            name=name, kind=kind, default=_json_default(default), choices=choices,
            optional=optional, help=info.description or None,
        ))
    return out


def _description(recipe: registry.Recipe) -> str:
    if recipe.description:
        return recipe.description.strip().splitlines()[0]
    # A config class's own docstring (not one it inherits from TrainConfig).
    doc = recipe.config_cls.__dict__.get("__doc__") or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def recipe_public(recipe: registry.Recipe) -> RecipePublic:
    return RecipePublic(name=recipe.name, description=_description(recipe), fields=_fields(recipe.config_cls))


@router.get("", response_model=RecipesPublic, operation_id="recipes-list")
def list_recipes(user: CurrentUser) -> RecipesPublic:
    """Every installed recipe, with the fields of its config and their defaults."""
    data = []
    for name in registry.recipe_names():
        try:
            recipe = registry.get_recipe(name)
        except Exception:  # a broken plugin must not hide the others
            log.warning("recipe %r could not be loaded; left out of the list", name, exc_info=True)
            continue
        data.append(recipe_public(recipe))
    return RecipesPublic(data=data, count=len(data))
