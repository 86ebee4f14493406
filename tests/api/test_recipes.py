"""The recipes resource: every installed recipe with its config fields, from the registry."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Literal

import pytest
from fastapi.testclient import TestClient

from gpufleet.api.app import create_app
from gpufleet.users.accounts import add_user
from gpufleet.users.tokens import create_token
from gpufleet.config import Settings
from gpufleet.db.session import session_scope
from gpufleet.engine import recipes as registry
from gpufleet.engine.config import TrainConfig, option
from gpufleet.engine.recipes.mlp import MLPConfig
from gpufleet.engine.recipes.sae import SAEConfig


def _by_name(body: dict) -> dict[str, dict]:
    return {r["name"]: r for r in body["data"]}


def _fields(recipe: dict) -> dict[str, dict]:
    return {f["name"]: f for f in recipe["fields"]}


def _model_defaults(cls: type[TrainConfig]) -> dict:
    return {name: info.get_default(call_default_factory=True) for name, info in cls.model_fields.items()}


def test_builtin_recipes_with_the_config_defaults(client: TestClient) -> None:
    body = client.get("/api/v1/recipes").json()
    recipes = _by_name(body)
    assert {"sae", "mlp"} <= set(recipes) and body["count"] == len(body["data"])
    for name, cls in (("sae", SAEConfig), ("mlp", MLPConfig)):
        fields = _fields(recipes[name])
        assert [f["name"] for f in recipes[name]["fields"]] == list(cls.model_fields)
        assert {n: f["default"] for n, f in fields.items()} == _model_defaults(cls)
        assert recipes[name]["description"] == registry.get_recipe(name).description
    sae = _fields(recipes["sae"])
    assert sae["variant"]["kind"] == "choice" and sae["variant"]["choices"] == ["relu", "topk"]
    assert sae["max_steps"]["kind"] == "int" and sae["max_steps"]["optional"] is False
    assert sae["lr"]["kind"] == "float" and sae["data_key"]["kind"] == "text"
    assert sae["grad_clip"] == {"name": "grad_clip", "kind": "float", "default": 1.0, "choices": None,
                                "optional": True, "help": "clip the gradient norm to this; empty = no clipping"}
    # Every field of every built-in recipe says, in one line, what it means.
    for name in ("sae", "mlp"):
        for f in recipes[name]["fields"]:
            assert f["help"] and "\n" not in f["help"] and len(f["help"]) <= 120, (name, f)
    assert sae["micro_batch_size"]["optional"] is True and sae["micro_batch_size"]["default"] is None
    mlp = _fields(recipes["mlp"])
    assert mlp["hidden"]["kind"] == "int-list" and mlp["hidden"]["default"] == [64, 64]
    assert mlp["activation"]["choices"] == ["relu", "gelu", "tanh"]


class ToyConfig(TrainConfig):
    """A toy recipe registered at runtime.

    Only the first line is the description.
    """

    width: int = option(3, "how wide the toy is")
    shape: Literal["round", "square"] | None = None
    loud: bool = False
    tags: list[int] = option(factory=lambda: [1, 2])


TOY = registry.Recipe(name="toy", config_cls=ToyConfig, build_fn=lambda c, d: None,
                      build_model_fn=lambda c: None)


class _EntryPoint:
    """What importlib.metadata's entry point offers the registry: a name and load()."""

    def __init__(self, name: str, target: object) -> None:
        self.name, self._target = name, target

    def load(self) -> object:
        if isinstance(self._target, Exception):
            raise self._target
        return self._target


@pytest.fixture
def toy_installed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    installed = registry._discover()
    extra = {"toy": _EntryPoint("toy", TOY), "broken": _EntryPoint("broken", ImportError("no such module"))}
    monkeypatch.setattr(registry, "_discover", lambda: {**installed, **extra})
    registry.get_recipe.cache_clear()
    yield
    registry.get_recipe.cache_clear()


def test_a_recipe_installed_at_runtime_is_listed(client: TestClient, toy_installed: None) -> None:
    recipes = _by_name(client.get("/api/v1/recipes").json())
    # A broken plugin is left out; the others still list.
    assert "broken" not in recipes and {"sae", "mlp", "toy"} <= set(recipes)
    toy = recipes["toy"]
    assert toy["description"] == "A toy recipe registered at runtime."
    fields = _fields(toy)
    assert fields["width"] == {"name": "width", "kind": "int", "default": 3, "choices": None,
                               "optional": False, "help": "how wide the toy is"}
    assert fields["shape"] == {"name": "shape", "kind": "choice", "default": None,
                               "choices": ["round", "square"], "optional": True, "help": None}
    assert fields["loud"]["kind"] == "bool" and fields["loud"]["default"] is False
    assert fields["tags"]["kind"] == "int-list" and fields["tags"]["default"] == [1, 2]
    # The shared fields come too, before the recipe's own.
    assert toy["fields"][0]["name"] == "max_steps"


def test_recipes_need_a_signed_in_user(sim_app_settings: Settings) -> None:
    settings = sim_app_settings.model_copy(update={"auth": "on", "secret_key": "recipes-secret-" + "z" * 40})
    with session_scope(settings) as sess:
        add_user(sess, "vera", "viewer")
        token = create_token(sess, "vera").secret
    with TestClient(create_app(settings)) as c:
        assert c.get("/api/v1/recipes").status_code == 401
        ok = c.get("/api/v1/recipes", headers={"Authorization": f"Bearer {token}"})
        assert ok.status_code == 200 and ok.json()["count"] >= 2


def test_listing_recipes_does_not_import_torch() -> None:
    code = ("import sys; from gpufleet.api.routes.recipes import recipe_public; "
            "from gpufleet.engine.recipes import get_recipe, recipe_names; "
            "[recipe_public(get_recipe(n)) for n in recipe_names()]; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
