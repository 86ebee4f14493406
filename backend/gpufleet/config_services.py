"""Settings of the worker's warm launchers and of notifications (webhooks).

A base class of :class:`gpufleet.config.Settings`, kept in a file of its own
so that ``config.py`` stays one idea of a readable size; every field here is a
``GPUFLEET_*`` setting like the others.
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings


class ServiceSettings(BaseSettings):
    # Interpreters each worker keeps ready with torch and gpufleet imported, that recipe trainings
    # running as the worker's own account start from (gpufleet.jobs.warmpool); 0 turns the pool off.
    warm_pool_size: int = Field(default=2, ge=0, le=32)
    # Warm launchers per member whose recipe trainings run as their own Unix account without a sandbox,
    # kept while that member started a training on this worker in the last member_warm_keep_s; 0: off.
    member_warm_pool_size: int = Field(default=1, ge=0, le=8)
    member_warm_keep_s: float = Field(default=600.0, gt=0, le=86400)

    # Webhooks (gpufleet.notify): the most hooks a user may register, how long a delivery may take,
    # how many times one is tried, and the first wait between tries (doubled each time, at most an hour).
    webhooks_per_user: int = Field(default=20, ge=1, le=1000)
    webhook_timeout_s: float = Field(default=10.0, gt=0, le=120)
    webhook_max_attempts: int = Field(default=8, ge=1, le=100)
    webhook_backoff_s: float = Field(default=5.0, gt=0, le=3600)
