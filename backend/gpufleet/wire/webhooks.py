"""Bodies of a user's webhooks (``/api/v1/webhooks``)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from gpufleet.bounds import MAX_URL, RequestBody
from gpufleet.notify.events import EVENTS

# The notifier builds EVENTS from its tables: pydantic reads the names from the tuple, mypy reads no Literal from one.
EventName = Literal[EVENTS]  # type: ignore[valid-type]
Format = Literal["json", "slack"]
EVENTS_HELP = f"which notifications to send: {', '.join(EVENTS)} (default: all)"


class _URLChecked(RequestBody):
    @field_validator("url", check_fields=False)
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is None:
            return v
        # The server's own check, loaded when a body is read (the client imports this module without it).
        from gpufleet.notify.hooks import HookError, check_url

        try:
            check_url(v)  # normalised where it is stored (hooks.check_target), which names the host as written
        except HookError as exc:
            raise ValueError(str(exc)) from None
        return v


class WebhookCreate(_URLChecked):
    url: str = Field(min_length=1, max_length=MAX_URL, description="where to POST: an http:// or https:// URL")
    format: Format = Field(default="json", description="json: the generic body, signed with HMAC-SHA256; "
                                                       "slack: {\"text\": ...} for Slack or Mattermost")
    events: list[EventName] | None = Field(default=None, min_length=1, max_length=len(EVENTS),
                                           description=EVENTS_HELP)


class WebhookUpdate(_URLChecked):
    url: str | None = Field(default=None, min_length=1, max_length=MAX_URL)
    format: Format | None = None
    events: list[EventName] | None = Field(default=None, min_length=1, max_length=len(EVENTS))
    enabled: bool | None = None


class WebhookPublic(BaseModel):
    id: uuid.UUID
    owner: str
    url: str
    format: Format
    events: list[str]
    enabled: bool
    created_at: datetime


class WebhookCreated(WebhookPublic):
    secret: str = Field(description="the HMAC-SHA256 key of X-Gpufleet-Signature; shown only now")


class WebhooksPublic(BaseModel):
    data: list[WebhookPublic]
    count: int


class WebhookTestPublic(BaseModel):
    delivered: bool
    error: str | None = Field(default=None, description="why the receiver did not take it: its status code (never "
                                                         "its body), or why no connection was made")
