"""A user's own webhooks: register, list, change, remove, send a test.

Every operation reaches the caller's own hooks only: another user's hook is a
404, for admins too (hooks carry their owner's secret and address). Members
and admins register hooks; a viewer, who has no trainings, reads an empty list.
Deliveries themselves are sent by ``gpufleet.jobs.notify_loop``, never here,
except the one a test asks for.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, HTTPException, Path, Response

from gpufleet.api.deps import CurrentUser, MemberUser, SessionDep, SettingsDep
from gpufleet.wire.webhooks import (
    WebhookCreate,
    WebhookCreated,
    WebhookPublic,
    WebhooksPublic,
    WebhookTestPublic,
    WebhookUpdate,
)
from gpufleet.api.security.openapi import error_response
from gpufleet.db.notify import Webhook
from gpufleet.db.session import write_session
from gpufleet.db.types import utcnow
from gpufleet.notify import hooks
from gpufleet.notify.messages import Notice
from gpufleet.notify.outbound import Policy, client
from gpufleet.notify.outbox import post

log = logging.getLogger(__name__)
router = APIRouter(prefix="/api/v1", tags=["webhooks"])
HookPath = Annotated[uuid.UUID, Path(description="a webhook's id")]
T = TypeVar("T")
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: error_response("You have no such webhook")}


def _public(h: Webhook) -> WebhookPublic:
    return WebhookPublic(id=h.id, owner=h.owner, url=h.url, format=h.format, events=list(h.events),  # type: ignore[arg-type]
                         enabled=h.enabled, created_at=h.created_at)


def _write(settings, fn: Callable[..., T]) -> T:
    try:
        with write_session(settings) as sess:
            return fn(sess)
    except hooks.HookNotFound as exc:
        raise HTTPException(404, str(exc)) from None
    except hooks.HookError as exc:
        raise HTTPException(422, str(exc)) from None


@router.post("/webhooks", response_model=WebhookCreated, status_code=201, operation_id="webhooks-create")
def create_webhook(body: WebhookCreate, settings: SettingsDep, user: MemberUser) -> WebhookCreated:
    """Register a webhook for your own trainings and sessions; its secret is in this answer only."""
    def make(sess) -> WebhookCreated:
        h = hooks.create(sess, user.name, body.url, body.format, body.events, limit=settings.webhooks_per_user,
                         policy=Policy(settings.webhook_allowed_networks))
        return WebhookCreated(**_public(h).model_dump(), secret=h.secret)

    return _write(settings, make)


@router.get("/webhooks", response_model=WebhooksPublic, operation_id="webhooks-list")
def list_webhooks(sess: SessionDep, user: CurrentUser) -> WebhooksPublic:
    """Your webhooks (never their secrets)."""
    data = [_public(h) for h in hooks.list_own(sess, user.name)]
    return WebhooksPublic(data=data, count=len(data))


@router.get("/webhooks/{hook_id}", response_model=WebhookPublic, operation_id="webhooks-get", responses=NOT_FOUND)
def get_webhook(hook_id: HookPath, settings: SettingsDep, user: CurrentUser) -> WebhookPublic:
    return _write(settings, lambda s: _public(hooks.get_own(s, user.name, hook_id)))


@router.patch("/webhooks/{hook_id}", response_model=WebhookPublic, operation_id="webhooks-update",
              responses=NOT_FOUND)
def update_webhook(hook_id: HookPath, body: WebhookUpdate, settings: SettingsDep, user: MemberUser) -> WebhookPublic:
    """Change a webhook's URL, format, events, or turn it off (``enabled: false``)."""
    return _write(settings, lambda s: _public(hooks.update(s, user.name, hook_id, url=body.url, fmt=body.format,
                                                           events=body.events, enabled=body.enabled,
                                                           policy=Policy(settings.webhook_allowed_networks))))


@router.delete("/webhooks/{hook_id}", status_code=204, operation_id="webhooks-delete", responses=NOT_FOUND)
def delete_webhook(hook_id: HookPath, settings: SettingsDep, user: MemberUser) -> Response:
    _write(settings, lambda s: hooks.remove(s, user.name, hook_id))
    return Response(status_code=204)


@router.post("/webhooks/{hook_id}/test", response_model=WebhookTestPublic, operation_id="webhooks-test",
             responses={**NOT_FOUND,
                        502: error_response("Sending the test failed in a way the server did not foresee")})
def test_webhook(hook_id: HookPath, settings: SettingsDep, user: MemberUser) -> WebhookTestPublic:
    """Send a ``test`` notification to the webhook now, signed as every delivery; says whether it was taken.

    Only the answer's status code comes back, never its body."""
    def load(sess) -> Webhook:
        h = hooks.get_own(sess, user.name, hook_id)
        sess.expunge(h)
        return h

    h = _write(settings, load)
    now = utcnow()
    notice = Notice(key=f"{h.id}:test:{now.timestamp():.0f}", event="test", time=now.isoformat(),
                    training={"id": None, "name": None, "owner": user.name, "kind": None, "status": None},
                    reason="a test from gpufleet", user=user.name)
    try:
        with client(Policy(settings.webhook_allowed_networks), settings.webhook_timeout_s) as http:
            ok, error = post(http, h, notice)
    except Exception as exc:  # post() says what it foresees; anything else is the sending's fault, not the caller's
        log.exception("the test of webhook %s failed", h.id)
        raise HTTPException(502, f"sending the test failed ({type(exc).__name__}); the server's log has the "
                                 "details, and changing the webhook's URL may help") from None
    return WebhookTestPublic(delivered=ok, error=error)
