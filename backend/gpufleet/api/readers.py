"""Who may read a training's config, events and logs: the one rule REST and the live stream both ask."""

from __future__ import annotations

from fastapi import HTTPException

from gpufleet.api.auth import AuthUser
from gpufleet.config import Settings


def may_read_training(settings: Settings, user: AuthUser, owner: str | None) -> bool:
    """Whether ``user`` may read a training's config, events and logs.

    ``GPUFLEET_TRAINING_VISIBILITY=owner`` (the default: logs often hold
    what a script printed, secrets included): its owner and admins only;
    others still see that it exists, who owns it and which GPUs it holds.
    ``team``: every signed-in user. REST and the live
    stream's ``training:<id>`` channel both ask here.
    """
    return settings.training_visibility == "team" or user.is_admin or (owner is not None and user.name == owner)


def training_read_refusal(settings: Settings, user: AuthUser, owner: str | None) -> str | None:
    """Why ``user`` may not read the training of ``owner`` (REST answers it with a 403), or None."""
    if may_read_training(settings, user, owner):
        return None
    return (f"the training belongs to {owner!r}; this server shows a training's config, events and logs only to"
            " its owner and admins (GPUFLEET_TRAINING_VISIBILITY=owner)")


def ensure_may_read_training(settings: Settings, user: AuthUser, owner: str) -> None:
    reason = training_read_refusal(settings, user, owner)
    if reason is not None:
        raise HTTPException(403, reason)
