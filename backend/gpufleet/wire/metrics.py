"""GPU metrics over time and now: ``/api/v1/system/metrics/history`` and ``/live``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel


class HistoryPoint(BaseModel):
    t: datetime
    samples: int
    utilization_min: float | None = None
    utilization_avg: float | None = None
    utilization_max: float | None = None
    memory_used_min: float | None = None
    memory_used_avg: float | None = None
    memory_used_max: float | None = None
    temperature_min: float | None = None
    temperature_avg: float | None = None
    temperature_max: float | None = None
    power_draw_min: float | None = None
    power_draw_avg: float | None = None
    power_draw_max: float | None = None


class HistorySeries(BaseModel):
    host: str | None
    gpu_index: int | None
    points: list[HistoryPoint]


class HistoryPublic(BaseModel):
    start: datetime
    end: datetime
    step_s: float
    source: str
    aggregate: bool
    series: list[HistorySeries]


class LivePublic(BaseModel):
    gpus: list[dict[str, Any]]
    aggregate: dict[str, Any]
    hosts: dict[str, dict[str, Any]]
    trainings: dict[str, dict[str, Any]]
