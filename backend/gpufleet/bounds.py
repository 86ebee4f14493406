"""Bounds of every number and path a request may carry.

A value past what the database column or the code can hold must be a 422
that names the field, never a 500 from the driver (PostgreSQL's INTEGER is
32-bit) or the file system (a name longer than 255 bytes). The bounds are in
the schemas and query parameters, so they are written into the OpenAPI schema
where clients and fuzzers see them.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

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
# A training's priority runs from -MAX_PRIORITY to MAX_PRIORITY; higher goes first and may preempt lower.
MAX_PRIORITY = 1000
# Byte offsets in a training's log.
MAX_OFFSET = JSON_INT_MAX
# A learning rate, a loss weight, a clipping norm: far past any useful value, still a
# number that stays finite through every product and sum a step makes of it.
MAX_COEFF = 1e6



def _whole_numbers(value: Any) -> Any:
    """``120.0`` read as ``120``: JSON Schema counts it an integer, and a float field takes an int."""
    if isinstance(value, float) and value.is_integer() and abs(value) <= JSON_INT_MAX:
        return int(value)
    if isinstance(value, dict):
        return {k: _whole_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole_numbers(v) for v in value]
    return value


# A webhook's URL.
MAX_URL = 2000
# A group's limits: what the database and the scheduler can hold; past them a value is a typo.
MAX_GPUS_LIMIT = 100_000
MAX_GPU_HOURS_LIMIT = 10_000_000.0
MAX_SHARE = 1_000_000.0
# A booking's own limits: the longest one and the furthest ahead (a year and a day).
MAX_BOOKING_HOURS = 24.0 * 366
MAX_BOOKING_AHEAD_DAYS = 366.0


class RequestBody(BaseModel):
    """A request body: unknown fields refused, every value of the type its schema says.

    Strict, so ``false`` is no number of hours and ``"3"`` no count: what the
    schema declares is what is checked, no more and no less.
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _integers_as_json_schema_reads_them(cls, data: Any) -> Any:
        return _whole_numbers(data)

GPUIndex = Annotated[int, Field(ge=0, le=MAX_GPU_INDEX)]
