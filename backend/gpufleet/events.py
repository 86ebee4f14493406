"""The one bus that carries live events: in-process, or Redis pub/sub in a fleet.

Publishers (the agent's sampler) call ``get_bus(settings).publish(topic, msg)``;
subscribers (the WebSocket hub of each API process) register a callback for a
topic. With no Redis the bus is a dict of callbacks in this process, which is
why the embedded default runs the agent inside the API process. With Redis,
messages go through ``PUBLISH gpufleet:ev:<topic>`` and one listener thread per
process hands them to the local callbacks, so every API process sees every
host's agent.

Callbacks run on the publisher's thread (local bus) or on the listener thread
(Redis); they must be quick and must not block (the hub only schedules work
on its event loop).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from functools import lru_cache
from typing import Any, Protocol

from gpufleet.config import StoreSettings

log = logging.getLogger(__name__)

Callback = Callable[[str, dict[str, Any]], None]
CHANNEL_PREFIX = "gpufleet:ev:"

# Topics in use.
TELEMETRY_SAMPLES = "telemetry.samples"  # {"host": name, "samples": [GPUSample.to_dict()], "health": {...}}


class Bus(Protocol):
    def publish(self, topic: str, message: dict[str, Any]) -> None: ...

    def subscribe(self, topic: str, callback: Callback) -> Callable[[], None]: ...


class _Subscribers:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_topic: dict[str, list[Callback]] = {}

    def add(self, topic: str, cb: Callback) -> Callable[[], None]:
        with self._lock:
            self._by_topic.setdefault(topic, []).append(cb)

        def remove() -> None:
            with self._lock:
                cbs = self._by_topic.get(topic, [])
                if cb in cbs:
                    cbs.remove(cb)

        return remove

    def count(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._by_topic.values())

    def deliver(self, topic: str, message: dict[str, Any]) -> None:
        with self._lock:
            cbs = list(self._by_topic.get(topic, ()))
        for cb in cbs:
            try:
                cb(topic, message)
            except Exception:  # one broken subscriber must not stop the others
                log.exception("event subscriber for %s failed", topic)


class LocalBus:
    """Delivers to callbacks in this process only."""

    def __init__(self) -> None:
        self._subs = _Subscribers()

    def publish(self, topic: str, message: dict[str, Any]) -> None:
        self._subs.deliver(topic, message)

    def subscribe(self, topic: str, callback: Callback) -> Callable[[], None]:
        return self._subs.add(topic, callback)


class RedisBus:
    """Redis pub/sub: every process with a subscriber runs one listener thread."""

    def __init__(self, url: str) -> None:
        import redis

        self.url = url
        self._client = redis.Redis.from_url(url, socket_timeout=5.0, socket_connect_timeout=2.0)
        self._subs = _Subscribers()
        self._listener: threading.Thread | None = None
        self._lock = threading.Lock()
        self.publish_errors = 0

    def publish(self, topic: str, message: dict[str, Any]) -> None:
        try:
            self._client.publish(CHANNEL_PREFIX + topic, json.dumps(message))
        except Exception as exc:  # noqa: BLE001 - live events are best effort; history is in the database
            self.publish_errors += 1
            log.warning("cannot publish %s to Redis: %s", topic, exc)

    def subscribe(self, topic: str, callback: Callback) -> Callable[[], None]:
        remove = self._subs.add(topic, callback)
        with self._lock:
            if self._listener is None:
                ready = threading.Event()
                self._listener = threading.Thread(
                    target=self._listen, args=(ready,), name="gpufleet-bus", daemon=True
                )
                self._listener.start()
                # Subscribers expect to see messages published after subscribe() returns.
                ready.wait(5)
        return remove

    def _listen(self, ready: threading.Event) -> None:
        import redis

        backoff = 0.5
        while True:
            try:
                client = redis.Redis.from_url(self.url, socket_connect_timeout=2.0, health_check_interval=15)
                pubsub = client.pubsub(ignore_subscribe_messages=True)
                pubsub.psubscribe(CHANNEL_PREFIX + "*")
                # Wait for the server's confirmation so no message after this is missed.
                while pubsub.get_message(timeout=1.0) is None and not pubsub.subscribed:
                    pass
                ready.set()
                backoff = 0.5
                for msg in pubsub.listen():
                    if msg.get("type") != "pmessage":
                        continue
                    topic = msg["channel"].decode().removeprefix(CHANNEL_PREFIX)
                    try:
                        payload = json.loads(msg["data"])
                    except ValueError:
                        continue
                    self._subs.deliver(topic, payload)
            except redis.RedisError as exc:
                ready.set()
                log.warning("event listener lost Redis (%s); reconnecting in %.1f s", exc, backoff)
                threading.Event().wait(backoff)
                backoff = min(10.0, backoff * 2)


_LOCAL = LocalBus()


@lru_cache(maxsize=4)
def _redis_bus(url: str) -> RedisBus:
    return RedisBus(url)


def get_bus(settings: StoreSettings) -> Bus:
    """The bus for this deployment: Redis when configured, else this process's own."""
    if settings.redis_url:
        return _redis_bus(settings.redis_url)
    return _LOCAL
