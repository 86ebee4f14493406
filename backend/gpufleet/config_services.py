"""Settings of the worker's warm launchers, of its services' passwords, and of notifications (webhooks).

A base class of :class:`gpufleet.config.Settings`, kept in a file of its own
so that ``config.py`` stays one idea of a readable size; every field here is a
``GPUFLEET_*`` setting like the others.
"""

from __future__ import annotations

import ipaddress

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings


class ServiceSettings(BaseSettings):
    # Interpreters each worker keeps ready with torch and gpufleet imported, that recipe trainings
    # running as the worker's own account start from (gpufleet.jobs.warmpool); 0 turns the pool off.
    warm_pool_size: int = Field(default=2, ge=0, le=32)
    # Warm launchers per member whose recipe trainings run as their own Unix account without a sandbox,
    # kept while that member started a training on this worker in the last member_warm_keep_s; 0: off.
    member_warm_pool_size: int = Field(default=1, ge=0, le=8)
    member_warm_keep_s: float = Field(default=600.0, gt=0, le=86400)
    # In a fleet, members' code shares each host's network with Redis and PostgreSQL: a worker refuses to
    # run it while either is reached without a password (gpufleet.jobs.isolation), unless this is on.
    allow_services_without_password: bool = False

    # Webhooks (gpufleet.notify): the most hooks a user may register, how long a delivery may take,
    # how many times one is tried, and the first wait between tries (doubled each time, at most an hour).
    webhooks_per_user: int = Field(default=20, ge=1, le=1000)
    webhook_timeout_s: float = Field(default=10.0, gt=0, le=120)
    webhook_max_attempts: int = Field(default=8, ge=1, le=100)
    webhook_backoff_s: float = Field(default=5.0, gt=0, le=3600)
    # Webhooks go to public addresses only (gpufleet.notify.outbound); these CIDR ranges are allowed too,
    # for a receiver on the team's own network: ["10.1.2.0/24", "fd12::/64"].
    webhook_allowed_networks: list[str] = Field(default_factory=list, max_length=100)

    @field_validator("webhook_allowed_networks")
    @classmethod
    def _check_networks(cls, v: list[str]) -> list[str]:
        for item in v:
            try:
                ipaddress.ip_network(item.strip(), strict=False)
            except ValueError:
                raise ValueError(f"{item!r} is not an IP network (e.g. 10.1.2.0/24 or fd12::/64)") from None
        return [item.strip() for item in v]
