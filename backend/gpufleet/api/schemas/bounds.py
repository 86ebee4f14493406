"""Bounds of every number and path a request may carry.

A value past what the database column or the code can hold must be a 422
that names the field, never a 500 from the driver (PostgreSQL's INTEGER is
32-bit) or the file system (a name longer than 255 bytes). The bounds are in
the schemas and query parameters, so they are written into the OpenAPI schema
where clients and fuzzers see them.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

# PostgreSQL INTEGER: steps, sequence numbers, GPU indexes, checkpoint intervals.
INT32_MAX = 2**31 - 1
# The largest integer a JSON number carries exactly in every client (JavaScript's).
JSON_INT_MAX = 2**53 - 1
# 16 TiB per rank: far beyond any GPU, still a number every layer holds.
MAX_MEMORY_MB = 16 * 1024 * 1024
MAX_GPU_INDEX = 4095
MAX_GPUS = 1024
# A path relative to the data root, and each of its parts (the file system's NAME_MAX).
MAX_PATH_CHARS = 1024
MAX_PATH_PART_CHARS = 255
MAX_HOST_CHARS = 255
# Byte offsets in a training's log.
MAX_OFFSET = JSON_INT_MAX

GPUIndex = Annotated[int, Field(ge=0, le=MAX_GPU_INDEX)]

# Config fields the server stores in INTEGER columns or uses as paths; the
# recipe checks the rest of its config (and every field's meaning).
_CONFIG_INTS = {"max_steps": (1, INT32_MAX), "checkpoint_every": (1, INT32_MAX), "log_every": (1, INT32_MAX),
                "global_batch_size": (1, INT32_MAX), "micro_batch_size": (1, INT32_MAX),
                "grad_accum_steps": (1, INT32_MAX), "keep_checkpoints": (1, INT32_MAX),
                "warmup_steps": (0, INT32_MAX), "seed": (0, JSON_INT_MAX)}

CONFIG_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": True,
    "properties": {
        **{name: {"type": ["integer", "null"] if name == "micro_batch_size" else "integer", "minimum": lo,
                  "maximum": hi} for name, (lo, hi) in _CONFIG_INTS.items()},
        "data_path": {"type": ["string", "null"], "maxLength": MAX_PATH_CHARS},
    },
    "description": (
        "the recipe's config fields; integers anywhere in it lie within"
        f" ±{JSON_INT_MAX}, and data_path has at most {MAX_PATH_CHARS} characters,"
        f" {MAX_PATH_PART_CHARS} per part"
    ),
}


def check_path(field: str, value: str) -> str:
    if len(value) > MAX_PATH_CHARS:
        raise ValueError(f"{field} has {len(value)} characters; at most {MAX_PATH_CHARS} are allowed")
    longest = max((len(p) for p in value.split("/")), default=0)
    if longest > MAX_PATH_PART_CHARS:
        raise ValueError(
            f"{field} has a part of {longest} characters; file and folder names have at most {MAX_PATH_PART_CHARS}"
        )
    return value


def _check_numbers(where: str, value: Any) -> None:
    if isinstance(value, bool):
        return
    if isinstance(value, int) and not -JSON_INT_MAX <= value <= JSON_INT_MAX:
        raise ValueError(f"{where} is {value}, beyond ±{JSON_INT_MAX} (the largest exact JSON integer)")
    if isinstance(value, dict):
        for k, v in value.items():
            _check_numbers(f"{where}.{k}", v)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_numbers(f"{where}[{i}]", v)


def check_config(config: dict[str, Any]) -> dict[str, Any]:
    """Refuse numbers and paths in a recipe config that no column or file system holds; names the field."""
    for name, (lo, hi) in _CONFIG_INTS.items():
        value = config.get(name)
        # Below the minimum is the recipe's to say (with its own words); above the maximum no column holds it.
        if isinstance(value, int) and not isinstance(value, bool) and value > hi:
            raise ValueError(f"config.{name} is {value}; it must be between {lo} and {hi}")
    _check_numbers("config", config)
    data_path = config.get("data_path")
    if isinstance(data_path, str):
        check_path("config.data_path", data_path)
    return config
