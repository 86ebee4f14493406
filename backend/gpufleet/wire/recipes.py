"""Schemas of the recipes resource: what a training can run and how it is configured."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

FieldKind = Literal["int", "float", "bool", "choice", "text", "int-list"]

# A config value as JSON: what a field defaults to.
JsonValue = bool | int | float | str | list[bool | int | float | str] | None


class RecipeFieldPublic(BaseModel):
    name: str
    kind: FieldKind
    default: JsonValue = Field(description="the value used when the field is left out; null when none")
    choices: list[str] | None = Field(default=None, description="the allowed values of a choice field")
    optional: bool = Field(description="null is an allowed value")
    help: str | None = Field(default=None, description="what the field means, when the recipe says")


class RecipePublic(BaseModel):
    name: str
    description: str
    fields: list[RecipeFieldPublic]


class RecipesPublic(BaseModel):
    data: list[RecipePublic]
    count: int
