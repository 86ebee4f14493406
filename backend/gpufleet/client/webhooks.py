"""The client's calls for the caller's own webhooks (mixed into ``gpufleet.client.Client``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpufleet import wire

if TYPE_CHECKING:
    from gpufleet.wire.webhooks import (
        WebhookCreated,
        WebhookPublic,
        WebhooksPublic,
        WebhookTestPublic,
    )
from gpufleet.client.sharing import checked

API = "/api/v1/webhooks"


class WebhookCalls:
    """Register, list, change, remove and test webhooks, over ``Client``'s ``_get``, ``_post`` and ``_send``."""

    _get: Any
    _post: Any
    _send: Any

    def webhooks(self) -> WebhooksPublic:
        return self._get(wire.WebhooksPublic, API)

    def add_webhook(self, url: str, *, format: str = "json", events: list[str] | None = None) -> WebhookCreated:  # noqa: A002
        """Register a webhook; the answer's ``secret`` (the signature's key) is shown this once."""
        fields: dict[str, Any] = {"url": url, "format": format}
        if events is not None:
            fields["events"] = events
        return self._post(wire.WebhookCreated, API, checked(wire.WebhookCreate, "add_webhook", **fields))

    def webhook(self, hook_id: str) -> WebhookPublic:
        return self._get(wire.WebhookPublic, f"{API}/{hook_id}")

    def update_webhook(self, hook_id: str, **fields: Any) -> WebhookPublic:
        body = checked(wire.WebhookUpdate, "update_webhook", **fields)
        r = self._send("PATCH", f"{API}/{hook_id}", json=body.model_dump(mode="json", exclude_unset=True))
        return wire.WebhookPublic.model_validate(r.json())

    def remove_webhook(self, hook_id: str) -> None:
        self._send("DELETE", f"{API}/{hook_id}")

    def test_webhook(self, hook_id: str) -> WebhookTestPublic:
        return self._post(wire.WebhookTestPublic, f"{API}/{hook_id}/test")
