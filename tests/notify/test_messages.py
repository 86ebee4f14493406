"""What a receiver gets (notify/messages.py): a sentence per event, the JSON body's fields, the signature
over ``<timestamp>.<body>``, and the rules a receiver's check keeps; the events a hook may choose."""

from __future__ import annotations

import hashlib
import hmac
import json
import time

import pytest

from gpufleet.notify import hooks, messages
from gpufleet.notify.events import BOOKING_EVENTS, EVENTS, SESSION_EVENTS, TRAINING_EVENTS

TRAINING = {"id": "5f0c3a9e-1111-2222-3333-444455556666", "name": "lr-sweep", "owner": "alice", "kind": "recipe",
            "status": "failed"}


def _notice(event: str = "training_failed", **over) -> messages.Notice:
    fields = dict(key="hook:42", event=event, time="2026-11-25T16:00:00+00:00", training=TRAINING)
    fields.update(over)
    return messages.Notice(**fields)


@pytest.mark.parametrize(("event", "text"), [
    ("training_started", "gpufleet: training lr-sweep (5f0c3a9e) of alice started"),
    ("training_succeeded", "gpufleet: training lr-sweep (5f0c3a9e) of alice succeeded"),
    ("training_failed", "gpufleet: training lr-sweep (5f0c3a9e) of alice failed"),
    ("training_preempted", "gpufleet: training lr-sweep (5f0c3a9e) of alice was preempted"),
    ("test", "gpufleet: training lr-sweep (5f0c3a9e) of alice sent a test notification"),
])
def test_each_training_event_has_its_sentence(event: str, text: str) -> None:
    assert _notice(event).as_text() == text
    assert json.loads(messages.body(_notice(event), "slack")) == {"text": text}


@pytest.mark.parametrize(("event", "words"), [("session_ready", "is ready"),
                                              ("session_idle_warning", "is idle and will be stopped"),
                                              ("session_stopped", "stopped")])
def test_a_session_is_called_a_session(event: str, words: str) -> None:
    notice = _notice(event, training={**TRAINING, "name": "nb", "kind": "session"})
    assert notice.as_text() == f"gpufleet: session nb (5f0c3a9e) of alice {words}"


def test_every_event_a_hook_may_choose_has_words_of_its_own() -> None:
    # A new notification without its words would read "... of alice session_new" in a chat.
    assert set(EVENTS) <= set(messages.WORDS)
    assert len(EVENTS) == len(set(EVENTS)) == len(TRAINING_EVENTS) + len(SESSION_EVENTS) + len(BOOKING_EVENTS)


BOOKING = {"id": "9a8b7c6d-1111-2222-3333-444455556666", "owner": "dana", "kind": "booking",
           "start": "2026-12-04T13:00:00+00:00", "end": "2026-12-04T19:00:00+00:00", "time_zone": "Europe/Berlin",
           "gpu_count": 2, "gpus": [{"host": "gpu-01", "index": 0}, {"host": "gpu-01", "index": 1}],
           "reason": "paper deadline", "released_at": None}


@pytest.mark.parametrize(("event", "words"), [("booking_starting", "starts soon"),
                                              ("booking_released", "was released")])
def test_a_booking_is_named_as_a_booking_with_its_owner(event: str, words: str) -> None:
    notice = _notice(event, training={}, booking=BOOKING, reason="why")
    assert notice.as_text() == f"gpufleet: booking 9a8b7c6d of dana {words}: why"
    assert json.loads(messages.body(notice, "slack")) == {"text": notice.as_text()}


def test_a_bookings_json_body_carries_the_booking_and_a_trainings_carries_none() -> None:
    body = json.loads(messages.body(_notice("booking_starting", training={}, booking=BOOKING), "json"))
    assert body["booking"] == BOOKING and body["training"] == {} and body["event"] == "booking_starting"
    assert "booking" not in json.loads(messages.body(_notice(), "json"))


def test_the_reason_follows_the_sentence_and_only_when_there_is_one() -> None:
    assert _notice(reason="rank 0: out of memory").as_text().endswith("of alice failed: rank 0: out of memory")
    assert ":" not in _notice(reason=None).as_text().split(") of ", 1)[1]


def test_the_json_body_has_every_field_and_no_more() -> None:
    notice = _notice(reason="rank 0: out of memory", user="bob", data={"exit_code": 137})
    raw = messages.body(notice, "json")
    assert json.loads(raw) == {"id": "hook:42", "event": "training_failed", "time": "2026-11-25T16:00:00+00:00",
                               "training": TRAINING, "reason": "rank 0: out of memory", "user": "bob",
                               "data": {"exit_code": 137}}
    assert json.loads(messages.body(_notice(), "json"))["data"] == {}  # never null: a receiver reads keys of it
    assert b" " not in raw.replace(b"rank 0: out of memory", b"")  # compact: the bytes signed are the bytes sent


def test_the_signature_is_hmac_sha256_of_the_timestamp_a_dot_and_the_body() -> None:
    raw = messages.body(_notice(), "json")
    h = messages.headers(_notice(), "whsec_k", raw, now=1_700_000_000.7)
    assert h["X-Gpufleet-Timestamp"] == "1700000000"
    expected = hmac.new(b"whsec_k", b"1700000000." + raw, hashlib.sha256).hexdigest()
    assert h["X-Gpufleet-Signature"] == f"sha256={expected}"
    assert h["X-Gpufleet-Event"] == "training_failed"
    assert h["X-Gpufleet-Delivery"] == h["Idempotency-Key"] == "hook:42"  # the same on every try of it
    assert h["Content-Type"] == "application/json"


def test_a_receiver_refuses_a_changed_timestamp_a_stale_one_and_one_that_is_no_number() -> None:
    raw = messages.body(_notice(), "json")
    now = time.time()
    h = messages.headers(_notice(), "whsec_k", raw, now=now)
    ts, sig = h["X-Gpufleet-Timestamp"], h["X-Gpufleet-Signature"]
    assert messages.verify("whsec_k", ts, raw, sig)
    assert not messages.verify("whsec_k", str(int(ts) + 1), raw, sig)  # the timestamp is signed too
    assert not messages.verify("whsec_k", "soon", raw, sig)
    old = messages.headers(_notice(), "whsec_k", raw, now=now - 290)
    assert messages.verify("whsec_k", old["X-Gpufleet-Timestamp"], raw, old["X-Gpufleet-Signature"])
    stale = messages.headers(_notice(), "whsec_k", raw, now=now - 310)
    assert not messages.verify("whsec_k", stale["X-Gpufleet-Timestamp"], raw, stale["X-Gpufleet-Signature"])
    assert messages.verify("whsec_k", stale["X-Gpufleet-Timestamp"], raw, stale["X-Gpufleet-Signature"],
                           tolerance_s=600)


def test_a_hook_chooses_known_events_once_each_in_its_order() -> None:
    assert hooks.check_events(None) == list(EVENTS)
    assert hooks.check_events(["training_failed", "session_ready", "training_failed"]) == ["training_failed",
                                                                                           "session_ready"]
    with pytest.raises(hooks.HookError) as err:
        hooks.check_events(["training_failed", "training_done", "finished"])
    assert str(err.value).startswith("unknown event(s) training_done, finished; known: training_started,")
    with pytest.raises(hooks.HookError, match="name at least one event"):
        hooks.check_events([])


@pytest.mark.parametrize(("url", "says"), [
    ("ftp://hooks.example.com/x", "starts with http:// or https://"),
    ("https://user:pw@hooks.example.com/x", "may not carry a user name or password"),
    ("https:///x", "names no host"),
    ("https://hooks.example.com/a b", "may not contain spaces"),
    ("https://hooks.example.com:http/x", "is not a URL"),
    ("https://hooks.example.com/" + "a" * 2100, "is longer than"),
])
def test_a_webhook_url_is_refused_saying_what_to_fix(url: str, says: str) -> None:
    with pytest.raises(hooks.HookError, match=says):
        hooks.check_url(url)


def test_a_webhook_url_is_kept_with_its_host_in_ascii() -> None:
    assert hooks.check_url("  https://hooks.example.com/t?k=1 ") == "https://hooks.example.com/t?k=1"
    assert hooks.check_url("https://BÜCHER.example/x") == "https://xn--bcher-kva.example/x"
