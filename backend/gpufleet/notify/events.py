"""Which ``training_events`` rows are notifications, and what each is called.

Trainings: their ``status`` events (``running``, ``succeeded``, ``failed``,
``preempted``). Sessions (trainings rows of kind ``session``): the session's
own event kinds (``session_ready``, ``session_idle_warning``,
``session_stopped``), never their rows' status events, which say the same
thing in a training's words.
"""

from __future__ import annotations

TRAINING_EVENTS = {
    "running": "training_started",
    "succeeded": "training_succeeded",
    "failed": "training_failed",
    "preempted": "training_preempted",
}
SESSION_EVENTS = ("session_ready", "session_idle_warning", "session_stopped")
EVENTS: tuple[str, ...] = (*TRAINING_EVENTS.values(), *SESSION_EVENTS)


def notification(event_kind: str, status: str | None, training_kind: str | None) -> str | None:
    """The notification a ``training_events`` row is, or None."""
    if training_kind == "session":
        return event_kind if event_kind in SESSION_EVENTS else None
    if event_kind == "status" and status is not None:
        return TRAINING_EVENTS.get(status)
    return None
