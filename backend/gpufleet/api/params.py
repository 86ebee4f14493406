"""Path and query parameters with the bounds of ``gpufleet.bounds``, for routes.

Kept apart from the schemas so that the Python client, which shares the
schemas, does not load FastAPI.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query

from gpufleet.bounds import INT32_MAX, MAX_GPU_INDEX, MAX_HOST_CHARS

GPUIndexPath = Annotated[int, Path(ge=0, le=MAX_GPU_INDEX, description="the GPU's index on its host")]
HostPath = Annotated[str, Path(min_length=1, max_length=MAX_HOST_CHARS, description="the host's name")]
SeqQuery = Annotated[int, Query(ge=0, le=INT32_MAX, description="only events with a larger seq (resume a stream)")]
StepQuery = Annotated[int, Query(ge=-1, le=INT32_MAX, description="only metrics of later steps")]
