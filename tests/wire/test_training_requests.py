"""A training request's shape (wire/training_requests.py): strict bodies, the bounds of the numbers the
server stores, and the words each refusal says. No server: these are the rules the API, the client and
the CLI share."""

from __future__ import annotations

import math
import re

import pytest
from pydantic import ValidationError

from gpufleet.bounds import JSON_INT_MAX, MAX_PATH_CHARS, MAX_PATH_PART_CHARS, MAX_PRIORITY
from gpufleet.wire.training_requests import (
    CONFIG_SCHEMA,
    BatchItem,
    TrainingBatchCreate,
    TrainingCreate,
    TrainingResume,
    check_config,
)


def _refused(model, **body) -> str:
    with pytest.raises(ValidationError) as err:
        model.model_validate(body)
    return str(err.value)


def test_a_plain_request_keeps_its_defaults() -> None:
    t = TrainingCreate(name="lr-1", recipe="mlp")
    assert (t.kind, t.config, t.max_restarts, t.priority, t.world_size, t.gpu_ids) == ("recipe", {}, 2, 0, None, None)


def test_an_unknown_field_is_refused_by_name() -> None:
    said = _refused(TrainingCreate, name="a", recipe="mlp", gpus=2)
    assert "gpus" in said and "Extra inputs are not permitted" in said


@pytest.mark.parametrize(("field", "value"), [("world_size", "2"), ("world_size", True), ("allow_rebalance", 1),
                                              ("max_restarts", "3"), ("name", 5)])
def test_values_come_in_their_own_type_never_coerced(field: str, value) -> None:
    said = _refused(TrainingCreate, **{"name": "a", "recipe": "mlp", field: value})
    assert field in said


def test_a_whole_float_is_an_integer_as_json_schema_reads_it() -> None:
    assert TrainingCreate(name="a", recipe="mlp", world_size=2.0).world_size == 2
    assert "world_size" in _refused(TrainingCreate, name="a", recipe="mlp", world_size=2.5)


@pytest.mark.parametrize(("field", "low", "high"), [("world_size", 1, 1024), ("max_restarts", 0, 100),
                                                    ("priority", -MAX_PRIORITY, MAX_PRIORITY),
                                                    ("gpus_per_host", 1, 64)])
def test_numbers_are_held_to_their_bounds_at_both_ends(field: str, low: int, high: int) -> None:
    assert getattr(TrainingCreate(name="a", recipe="mlp", **{field: low}), field) == low
    assert getattr(TrainingCreate(name="a", recipe="mlp", **{field: high}), field) == high
    assert field in _refused(TrainingCreate, name="a", recipe="mlp", **{field: low - 1})
    assert field in _refused(TrainingCreate, name="a", recipe="mlp", **{field: high + 1})


def test_names_codes_and_pools_are_held_to_their_forms() -> None:
    assert "name" in _refused(TrainingCreate, name="", recipe="mlp")
    assert "name" in _refused(TrainingCreate, name="x" * 256, recipe="mlp")
    assert "code" in _refused(TrainingCreate, name="a", kind="script", code="ab" * 31)  # 62 characters
    assert "code" in _refused(TrainingCreate, name="a", kind="script", code="G" * 64)  # not hex
    assert TrainingCreate(name="a", kind="script", code="0f" * 32).code == "0f" * 32
    assert "pool" in _refused(TrainingCreate, name="a", recipe="mlp", pool="Gpu Pool")
    assert "kind" in _refused(TrainingCreate, name="a", kind="session")


def test_hosts_is_a_count_or_names() -> None:
    assert TrainingCreate(name="a", recipe="mlp", hosts=2).hosts == 2
    assert TrainingCreate(name="a", recipe="mlp", hosts=["n1", "n2"]).hosts == ["n1", "n2"]
    assert "hosts" in _refused(TrainingCreate, name="a", recipe="mlp", hosts=0)
    assert "hosts" in _refused(TrainingCreate, name="a", recipe="mlp", hosts=[])
    assert "hosts" in _refused(TrainingCreate, name="a", recipe="mlp", hosts=[""])


def test_from_training_is_a_uuid_given_as_text() -> None:
    t = TrainingCreate(name="a", recipe="mlp", from_training="5f0c3a9e-1111-2222-3333-444455556666")
    assert str(t.from_training) == "5f0c3a9e-1111-2222-3333-444455556666"
    assert "from_training" in _refused(TrainingCreate, name="a", recipe="mlp", from_training="run-7")


def test_a_config_number_past_its_column_is_refused_naming_the_field_and_its_bounds() -> None:
    with pytest.raises(ValueError, match=r"^config\.max_steps is 2147483648; it must be between 1 and 2147483647$"):
        check_config({"max_steps": 2**31})
    said = _refused(TrainingCreate, name="a", recipe="mlp", config={"log_every": 2**40})
    assert "config.log_every is 1099511627776; it must be between 1 and 2147483647" in said


@pytest.mark.parametrize(("config", "says"), [
    ({"lr": math.nan}, "config.lr is nan; give a finite number"),
    ({"extra": {"scale": [1.0, math.inf]}}, "config.extra.scale[1] is inf; give a finite number"),
    ({"buckets": [JSON_INT_MAX + 1]}, f"config.buckets[0] is {JSON_INT_MAX + 1}, beyond ±{JSON_INT_MAX}"),
    ({"data_path": "/d/" + "x" * MAX_PATH_CHARS},
     f"config.data_path has {MAX_PATH_CHARS + 3} characters; at most {MAX_PATH_CHARS} are allowed"),
    ({"data_path": "/d/" + "x" * (MAX_PATH_PART_CHARS + 1)},
     f"config.data_path has a part of {MAX_PATH_PART_CHARS + 1} characters; file and folder names have at most "
     f"{MAX_PATH_PART_CHARS}"),
])
def test_numbers_and_paths_no_column_or_file_system_holds_are_refused_where_they_are(config, says: str) -> None:
    with pytest.raises(ValueError, match=r"\A" + re.escape(says)):
        check_config(config)
    assert says in _refused(TrainingResume, config=config)
    assert says in _refused(BatchItem, name="a", recipe="mlp", config=config)


def test_a_config_within_bounds_is_left_as_it_was() -> None:
    config = {"max_steps": 2**31 - 1, "lr": 1e-3, "flag": True, "data_path": "/data/" + "x" * MAX_PATH_PART_CHARS,
              "layers": [16, 16], "seed": -5}
    assert check_config(dict(config)) == config
    assert TrainingCreate(name="a", recipe="mlp", config=config).config == config


def test_the_schema_declares_the_bounds_the_check_holds() -> None:
    props = CONFIG_SCHEMA["properties"]
    assert props["max_steps"] == {"type": "integer", "minimum": 1, "maximum": 2**31 - 1}
    assert props["micro_batch_size"]["type"] == ["integer", "null"]
    assert props["data_path"] == {"type": ["string", "null"], "maxLength": MAX_PATH_CHARS}
    assert CONFIG_SCHEMA["additionalProperties"] is True


def test_a_batch_is_one_single_gpu_request_per_item_with_the_batchs_settings() -> None:
    batch = TrainingBatchCreate(items=[{"name": "a", "recipe": "mlp"}, {"name": "b", "recipe": "sae",
                                                                        "config": {"max_steps": 5}, "memory_mb": 512}],
                                host="h1", priority=3, max_restarts=0)
    reqs = batch.requests()
    assert [(r.name, r.recipe, r.config, r.memory_mb) for r in reqs] == [("a", "mlp", {}, None),
                                                                        ("b", "sae", {"max_steps": 5}, 512)]
    assert {(r.world_size, r.host, r.priority, r.max_restarts) for r in reqs} == {(1, "h1", 3, 0)}
    assert "items" in _refused(TrainingBatchCreate, items=[])
    assert "strategy" in _refused(TrainingBatchCreate, items=[{"name": "a", "recipe": "mlp"}], strategy="random")


def test_a_request_round_trips_through_its_json() -> None:
    t = TrainingCreate(name="lr-1", recipe="mlp", config={"lr": 0.01, "max_steps": 10}, world_size=2, priority=-4,
                       hosts=["n1"], from_training="5f0c3a9e-1111-2222-3333-444455556666", memory="24GiB")
    assert TrainingCreate.model_validate_json(t.model_dump_json()) == t
