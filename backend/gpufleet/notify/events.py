"""Which ``training_events`` rows are notifications, and what each is called.

Trainings: their ``status`` events (``running``, ``succeeded``, ``failed``,
``preempted``). Sessions (rows whose kind a person calls a session): the session's
own event kinds (``session_ready``, ``session_idle_warning``,
``session_stopped``), never their rows' status events, which say the same
thing in a training's words. Bookings: ``booking_starting`` (within
``GPUFLEET_BOOKING_NOTICE_LEAD_S`` of its start) and ``booking_released``
(cancelled, or given back unused), the kinds of ``booking_events`` rows.
"""

from __future__ import annotations

from gpufleet.db.bookings import RELEASED, STARTING
from gpufleet.workkinds import noun

TRAINING_EVENTS = {
    "running": "training_started",
    "succeeded": "training_succeeded",
    "failed": "training_failed",
    "preempted": "training_preempted",
}
SESSION_EVENTS = ("session_ready", "session_idle_warning", "session_stopped")
BOOKING_EVENTS = (STARTING, RELEASED)
EVENTS: tuple[str, ...] = (*TRAINING_EVENTS.values(), *SESSION_EVENTS, *BOOKING_EVENTS)


def _as_training(event_kind: str, status: str | None) -> str | None:
    return TRAINING_EVENTS.get(status) if event_kind == "status" and status is not None else None


def _as_session(event_kind: str, status: str | None) -> str | None:
    return event_kind if event_kind in SESSION_EVENTS else None


# Which rows notify, by what a person calls the row's kind (gpufleet.workkinds.noun).
BY_NOUN = {"training": _as_training, "session": _as_session}


def notification(event_kind: str, status: str | None, training_kind: str | None) -> str | None:
    """The notification a ``training_events`` row is, or None."""
    return BY_NOUN.get(noun(training_kind), _as_training)(event_kind, status)
