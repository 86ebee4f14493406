"""Section ``telemetry``: how often GPUs are sampled and how long their history is kept."""

from __future__ import annotations

from pydantic import BaseModel, Field


class TelemetrySettings(BaseModel):
    sample_interval_s: float = Field(default=1.0, gt=0.05, le=60)
    slow_sample_interval_s: float = Field(default=10.0, gt=0.1, le=600)
    retention_days: int = Field(default=7, ge=1, le=3650)
    rollup_retention_days: int = Field(default=90, ge=1, le=3650)
