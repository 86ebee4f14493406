"""The agent: register this host, heartbeat, sample every GPU, store and publish the samples.

``start_agent(settings, stop_event) -> threading.Thread`` is called by
``gpufleet serve`` (embedded default: a thread in the API process, publishing
on the in-process bus) and by ``gpufleet worker`` (fleet: publishing through
Redis). Each round (``sample_interval_s``) the agent:

1. samples every GPU (:class:`~gpufleet.telemetry.vendors.HostSampler`);
2. puts the samples in the live view (:mod:`gpufleet.telemetry.live`: this
   process, and Redis in a fleet) and on the bus (``telemetry.samples``);
3. hands them to the :class:`~gpufleet.telemetry.storage.MetricsWriter`,
   whose own thread writes them to ``gpu_metrics_history``.

A third thread keeps the history bounded (partitions, rollups, expiry).
Nothing here waits on the database: when it is away, samples keep flowing
live and wait in the writer's buffer.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from datetime import datetime, timezone
from typing import Any

from gpufleet.config import Settings
from gpufleet.events import TELEMETRY_SAMPLES, get_bus
from gpufleet.telemetry.inventory import HEARTBEAT_S, heartbeat, register_host
from gpufleet.telemetry.gpu_health import HealthWatch
from gpufleet.telemetry.live import LOCAL, write_live_redis
from gpufleet.telemetry.owners import TrainingOwners
from gpufleet.telemetry.storage import MetricsWriter

log = logging.getLogger(__name__)

MAINTENANCE_S = 300.0


class Agent:
    def __init__(self, settings: Settings, stop: threading.Event | None = None) -> None:
        self.settings = settings
        self.stop_event = stop or threading.Event()
        self.host_id: uuid.UUID | None = None
        self.owners = TrainingOwners(settings, settings, settings)
        self.sampler: Any = None
        self.writer: MetricsWriter | None = None
        self.rounds = 0
        self.errors = 0
        self.last_duration_s = 0.0
        self.last_sample_unix: float | None = None
        self._threads: list[threading.Thread] = []
        self.health_watch = HealthWatch(settings)

    def health(self) -> dict[str, Any]:
        w = self.writer.stats if self.writer else None
        return {
            "samples_total": self.rounds, "sample_errors_total": self.errors,
            "last_sample_unix": self.last_sample_unix, "last_duration_s": self.last_duration_s,
            "disabled_fields": self.sampler.disabled_fields if self.sampler else 0,
            "buffered": w.buffered if w else 0, "written_total": w.written_total if w else 0,
            "dropped_total": w.dropped_total if w else 0, "last_error": w.last_error if w else None,
        }

    def _connect(self) -> bool:
        """Register the host once the database answers; True when ready to store history."""
        if self.writer is not None:
            return True
        try:
            self.host_id = register_host(self.settings).host_id
        except Exception as exc:  # noqa: BLE001 - the database may come later; keep sampling live
            log.warning("cannot register host %s yet: %s", self.settings.host_name, exc)
            return False
        self.writer = MetricsWriter(self.settings, self.host_id)
        flush_s = self.settings.sample_interval_s
        if self.settings.is_sqlite:
            # Every commit here can fail another connection's read-then-write
            # transaction on SQLite ("database is locked"); commit less often.
            flush_s = max(flush_s, 5.0)
        self._spawn(self.writer.run, "gpufleet-metrics-writer", self.stop_event, flush_s)
        self._spawn(self._maintenance_loop, "gpufleet-retention")
        return True

    def _spawn(self, target: Any, name: str, *args: Any) -> None:
        t = threading.Thread(target=target, args=args, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def _maintenance_loop(self) -> None:
        from gpufleet.telemetry.retention import maintain

        while not self.stop_event.is_set():
            try:
                maintain(self.settings, self.settings)
            except Exception as exc:  # noqa: BLE001 - try again next time
                log.warning("metrics retention failed: %s", exc)
            self.stop_event.wait(MAINTENANCE_S)

    def round(self) -> list[Any]:
        """Sample once and hand the samples to every consumer."""
        t0 = time.monotonic()
        samples = self.sampler.sample()
        self.rounds += 1
        self.last_sample_unix = time.time()
        self.last_duration_s = time.monotonic() - t0
        host = self.settings.host_name
        LOCAL.put_host(host, samples)
        health = self.health()
        LOCAL.put_health(host, health)
        if self.settings.redis_url:
            try:
                write_live_redis(self.settings, self.settings, host, samples, health)
            except Exception as exc:  # noqa: BLE001 - live view only; history still goes to the database
                log.warning("cannot write live samples to Redis: %s", exc)
        get_bus(self.settings).publish(TELEMETRY_SAMPLES, {
            "host": host, "samples": [s.to_dict() for s in samples],
            "sent": datetime.now(timezone.utc).isoformat(),
        })
        if self.writer is not None:
            self.writer.add(samples)
            try:  # writes only when a GPU's health changes
                self.health_watch.check(samples)
            except Exception as exc:  # noqa: BLE001 - the database may be away; tried again next round
                log.warning("cannot record a GPU's health: %s", exc)
        return samples

    def run(self) -> None:
        from gpufleet.telemetry.vendors import HostSampler

        self.sampler = HostSampler(self.settings, self.owners)
        interval = self.settings.sample_interval_s
        next_at = time.monotonic()
        last_beat = -1e9
        try:
            while not self.stop_event.is_set():
                ready = self._connect()
                try:
                    self.round()
                except Exception:  # one bad round must not stop the agent
                    self.errors += 1
                    log.exception("sampling round failed")
                if ready and time.monotonic() - last_beat >= HEARTBEAT_S:
                    last_beat = time.monotonic()
                    try:
                        heartbeat(self.settings, self.settings)
                    except Exception as exc:  # noqa: BLE001
                        log.warning("heartbeat failed: %s", exc)
                # Fixed cadence: a slow round shortens the next wait, it does not shift the grid.
                next_at += interval
                delay = next_at - time.monotonic()
                if delay < 0:
                    next_at = time.monotonic()
                    delay = 0
                self.stop_event.wait(delay)
        finally:
            self.sampler.close()
            for t in self._threads:
                t.join(timeout=15)
            self._write_last_round()

    def _write_last_round(self) -> None:
        """Write what a round added after the writer's own last flush: the writer sees the stop too,
        and may have flushed and ended while this thread's last round was still adding its samples."""
        if self.writer is None:
            return
        try:
            self.writer.flush()
        except Exception:  # noqa: BLE001 - the database is away at shutdown; nothing more can be done
            log.warning("stopping with the last round's metric rows unwritten")

    def start(self) -> threading.Thread:
        t = threading.Thread(target=self.run, name="gpufleet-agent", daemon=True)
        t.start()
        return t


def start_agent(settings: Settings, stop_event: threading.Event) -> threading.Thread:
    """Run the agent in a background thread until ``stop_event`` is set."""
    return Agent(settings, stop_event).start()
