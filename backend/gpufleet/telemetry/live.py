"""The newest sample of every GPU of the fleet: ``read_live_samples(settings)``.

Where the newest samples live depends on the deployment:

- embedded default (no Redis): the agent runs as a thread in this process and
  keeps them in :data:`LOCAL` (a dict guarded by a lock);
- fleet (``GPUFLEET_REDIS_URL`` set): each host's agent writes one Redis hash
  ``gpufleet:live:host:<name>`` (field = GPU index, value = the sample as JSON)
  with a TTL of a few sample intervals, so a host whose agent stops vanishes
  from the live view on its own instead of showing stale numbers forever.
"""

from __future__ import annotations

import json
import logging
import threading
from functools import lru_cache
from typing import TYPE_CHECKING

from gpufleet.config import StoreSettings, TelemetrySettings
from gpufleet.telemetry.sample import GPUSample

if TYPE_CHECKING:
    import redis
    from redis.typing import EncodableT, FieldT

log = logging.getLogger(__name__)

LIVE_KEY_PREFIX = "gpufleet:live:host:"
HEALTH_KEY_PREFIX = "gpufleet:live:health:"


def live_ttl_s(settings: TelemetrySettings) -> int:
    # Long enough to survive a slow sample or two, short enough that a dead
    # host disappears within seconds.
    return max(5, int(settings.sample_interval_s * 5) + 1)


class LocalLiveStore:
    """Newest sample per (host, index), for agents running in this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._samples: dict[tuple[str, int], GPUSample] = {}
        self._health: dict[str, dict] = {}

    def put_health(self, host: str, health: dict) -> None:
        with self._lock:
            self._health[host] = health

    def health(self) -> dict[str, dict]:
        with self._lock:
            return dict(self._health)

    def put_host(self, host: str, samples: list[GPUSample]) -> None:
        """Replace everything known about ``host`` (GPUs that vanished go too)."""
        with self._lock:
            for key in [k for k in self._samples if k[0] == host]:
                del self._samples[key]
            for s in samples:
                self._samples[s.key] = s

    def all(self) -> list[GPUSample]:
        with self._lock:
            return sorted(self._samples.values(), key=lambda s: s.key)

    def clear(self) -> None:
        with self._lock:
            self._samples.clear()
            self._health.clear()


LOCAL = LocalLiveStore()


@lru_cache(maxsize=4)
def redis_client(url: str) -> redis.Redis:
    import redis as redis_mod

    return redis_mod.Redis.from_url(url, socket_timeout=2.0, socket_connect_timeout=2.0)


def write_live_redis(store_settings: StoreSettings, telemetry_settings: TelemetrySettings, host: str,
                     samples: list[GPUSample], health: dict | None = None) -> None:
    """Publish ``host``'s newest samples (and its agent's health) for every API process to read, for a few
    sampling intervals."""
    assert store_settings.redis_url
    key = LIVE_KEY_PREFIX + host
    mapping: dict[FieldT, EncodableT] = {str(s.index): json.dumps(s.to_dict()) for s in samples}
    pipe = redis_client(store_settings.redis_url).pipeline(transaction=True)
    pipe.delete(key)
    if mapping:
        pipe.hset(key, mapping=mapping)
        pipe.expire(key, live_ttl_s(telemetry_settings))
    if health is not None:
        pipe.set(HEALTH_KEY_PREFIX + host, json.dumps(health, default=str), ex=live_ttl_s(telemetry_settings))
    pipe.execute()


def read_agent_health(settings: StoreSettings) -> dict[str, dict]:
    """Each reporting agent's sampler and writer health, by host name."""
    if settings.redis_url:
        try:
            client = redis_client(settings.redis_url)
            keys = sorted(client.scan_iter(match=HEALTH_KEY_PREFIX + "*", count=500))
            values = client.mget(keys) if keys else []
            return {k.decode().removeprefix(HEALTH_KEY_PREFIX): json.loads(v)
                    for k, v in zip(keys, values, strict=True) if v}
        except Exception as exc:  # noqa: BLE001
            log.warning("cannot read agent health from Redis: %s", exc)
    return LOCAL.health()


def _read_redis(url: str) -> list[GPUSample]:
    client = redis_client(url)
    keys = sorted(client.scan_iter(match=LIVE_KEY_PREFIX + "*", count=500))
    if not keys:
        return []
    pipe = client.pipeline(transaction=False)
    for k in keys:
        pipe.hgetall(k)
    out: list[GPUSample] = []
    for rows in pipe.execute():
        for raw in rows.values():
            try:
                out.append(GPUSample.from_dict(json.loads(raw)))
            except (ValueError, KeyError, TypeError) as exc:
                # One bad entry (an agent of another version) must not hide the fleet.
                log.warning("skipping an unreadable live sample: %s", exc)
    return sorted(out, key=lambda s: s.key)


def read_live_samples(settings: StoreSettings) -> list[GPUSample]:
    """The newest sample of every GPU, sorted by (host, index).

    In a fleet this reads Redis; if Redis cannot be reached it falls back to
    whatever agents run in this process (possibly none) and logs why.
    """
    if settings.redis_url:
        try:
            return _read_redis(settings.redis_url)
        except Exception as exc:  # noqa: BLE001 - any client error means "no fleet view"
            log.warning("cannot read live samples from Redis (%s); using this process's agent only", exc)
    return LOCAL.all()
