"""Which training events are notifications, what they are called, and how they are worded and signed."""

from __future__ import annotations

import json
import time

from gpufleet.notify import messages
from gpufleet.notify.events import notification


def test_trainings_notify_by_status_and_sessions_by_their_own_events() -> None:
    assert notification("status", "running", "recipe") == "training_started"
    assert notification("status", "succeeded", "script") == "training_succeeded"
    assert notification("status", "failed", "recipe") == "training_failed"
    assert notification("status", "preempted", "recipe") == "training_preempted"
    assert notification("retry", "queued", "recipe") is None
    assert notification("checkpoint", None, "recipe") is None
    # A session (a trainings row of kind session) speaks through the session's events only.
    assert notification("status", "running", "session") is None
    assert notification("session_ready", "running", "session") == "session_ready"
    assert notification("session_idle_warning", "running", "session") == "session_idle_warning"
    assert notification("session_stopped", "cancelled", "session") == "session_stopped"


def test_bodies_and_signature() -> None:
    notice = messages.Notice(key="h:1", event="training_failed", time="2026-11-25T16:00:00+00:00",
                             training={"id": "0123456789ab", "name": "lr-sweep", "owner": "alice", "kind": "recipe"},
                             reason="rank 0: out of memory")
    slack = json.loads(messages.body(notice, "slack"))
    assert slack == {"text": "gpufleet: training lr-sweep (01234567) of alice failed: rank 0: out of memory"}
    raw = messages.body(notice, "json")
    assert json.loads(raw)["event"] == "training_failed" and json.loads(raw)["id"] == "h:1"
    h = messages.headers(notice, "whsec_x", raw)
    assert h["Idempotency-Key"] == "h:1"
    assert messages.verify("whsec_x", h["X-Gpufleet-Timestamp"], raw, h["X-Gpufleet-Signature"])
    assert not messages.verify("whsec_y", h["X-Gpufleet-Timestamp"], raw, h["X-Gpufleet-Signature"])
    assert not messages.verify("whsec_x", h["X-Gpufleet-Timestamp"], raw + b" ", h["X-Gpufleet-Signature"])
    old = messages.headers(notice, "whsec_x", raw, now=time.time() - 3600)
    assert not messages.verify("whsec_x", old["X-Gpufleet-Timestamp"], raw, old["X-Gpufleet-Signature"])
