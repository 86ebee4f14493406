"""Section ``webhooks``: how many hooks a user may register, and how deliveries are made and retried."""

from __future__ import annotations

from pydantic import BaseModel, Field, field_validator

from gpufleet.config.networks import ip_networks


class WebhookSettings(BaseModel):
    # The most hooks a user may register, how long a delivery may take, how many times one is tried,
    # and the first wait between tries (doubled each time, at most an hour).
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
        return ip_networks(v, "an IP network (e.g. 10.1.2.0/24 or fd12::/64)")
