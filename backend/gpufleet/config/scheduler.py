"""Section ``scheduler``: queue order, priorities and preemption, idle GPUs, and the memory estimate's budget."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class SchedulerSettings(BaseModel):
    preemptible_default: bool = True
    admin_trainings_preemptible: bool = False
    # The highest priority a member may give a training unless an admin set a cap for them or
    # their group (gpufleet.users.groups.priority_cap); above 0 they could preempt each other's.
    member_max_priority: int = Field(default=0, ge=0, le=1000)
    max_queued_per_user: int = Field(default=500, ge=1)
    # Fair-share queue order (gpufleet.scheduling.fairshare): on/off, and the half-life of past usage.
    fair_share: bool = True
    fair_share_half_life_h: float = Field(default=168.0, gt=0, le=100_000)
    # A training whose GPUs stay below the threshold for the window is warned about or stopped.
    idle_action: Literal["off", "warn", "stop"] = "warn"
    idle_threshold_percent: float = Field(default=5.0, ge=0, le=100)
    idle_window_s: float = Field(default=1800.0, ge=5, le=30 * 86400)
    # Memory held on a GPU by processes gpufleet did not start, above which the scheduler plans around it.
    foreign_memory_threshold_mb: int = Field(default=1024, ge=0)
    # Memory estimates of the recommend/validate endpoints (gpufleet.scheduling.memory_pool):
    # processes that trace, the most seconds one trace may take, and requests per user a minute; `serve`
    # traces every recipe's default config at start, so the first estimate asked for is ready, and loads
    # torch for the first new training's estimate (estimate_warm off: both wait for their first use).
    estimate_workers: int = Field(default=2, ge=1, le=64)
    estimate_budget_s: float = Field(default=20.0, gt=0, le=600)
    estimate_rate_per_minute: int = Field(default=30, ge=1, le=10000)
    estimate_warm: bool = True
    # Bookings (gpufleet.bookings, docs/bookings.md): a member's limits (an admin books past them), the grace
    # after a booking's start within which the booker's work must run on it or the rest is released, and how
    # a booking counts against weekly GPU-hour quotas: "booked" adds its booked time that the booker's own work
    # did not use to the time held (so a booking costs what it kept from others), "used" counts only what ran.
    booking_max_ahead_days: float = Field(default=28.0, gt=0, le=366)
    booking_max_hours: float = Field(default=72.0, gt=0, le=24 * 366)
    booking_hours_per_week: float = Field(default=336.0, ge=0)  # GPU-hours per ISO week (UTC) of the start
    booking_max_gpus: int = Field(default=8, ge=1)  # GPUs one member's bookings hold at once
    booking_release_grace_s: float = Field(default=1800.0, ge=0, le=7 * 86400)
    # How long before a booking starts its owner is told (a booking_starting event, which webhooks send).
    booking_notice_lead_s: float = Field(default=900.0, ge=0, le=7 * 86400)
    booking_quota_counts: Literal["booked", "used"] = "booked"
