"""The Celery app: Redis in a fleet, kombu's filesystem transport embedded.

Celery only delivers "run training <id>" to the queue ``host.<name>`` of the
host that owns the GPUs; the row in ``trainings`` holds every bit of state.

``app`` (module level, built on first use from the ``GPUFLEET_*``
environment) is what Celery's own tools find:
``celery -A gpufleet.jobs.celery_app inspect ping|active|registered`` and
``celery -A gpufleet.jobs.celery_app flower``. On Redis, workers send
heartbeats and task events, so Flower lists workers and their tasks.
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

from celery import Celery

from gpufleet.config import Settings, StoreSettings

TASK_RUN = "gpufleet.run_training"


def host_queue(host_name: str) -> str:
    return f"host.{host_name}"


def broker_dir(settings: StoreSettings) -> Path:
    return settings.data_dir / "broker"


def make_celery(settings: Settings) -> Celery:
    app = Celery("gpufleet", set_as_current=False)
    if settings.redis_url:
        broker = settings.redis_url
        transport_options: dict[str, object] = {
            # Short on purpose: a message lost with a dead worker comes back
            # soon. A redelivered message is harmless because the task claims
            # the row with a compare-and-set and skips rows it cannot claim.
            "visibility_timeout": max(2 * settings.lease_s, 4),
        }
    else:
        folder = broker_dir(settings)
        for sub in ("queue", "control", "processed"):
            (folder / sub).mkdir(parents=True, exist_ok=True)
        # A host name, though the folder transport ignores it: without one kombu warns on every connect.
        broker = "filesystem://localhost/"
        transport_options = {
            # Producer and consumer share one folder: both sides are this machine.
            "data_folder_in": str(folder / "queue"),
            "data_folder_out": str(folder / "queue"),
            "control_folder": str(folder / "control"),
            "processed_folder": str(folder / "processed"),
            "store_processed": False,
            # The launch latency budget is a second; poll often.
            "polling_interval": 0.05,
        }
    app.conf.update(
        broker_url=broker,
        # Our filesystem transport writes each message atomically (jobs/fsbroker.py).
        broker_transport=None if settings.redis_url else "gpufleet.jobs.fsbroker:Transport",
        broker_transport_options=transport_options,
        broker_connection_retry_on_startup=True,
        task_ignore_result=True,
        task_serializer="json",
        accept_content=["json"],
        # Acknowledge on receipt: a training is never re-run because a message
        # is redelivered; the recovery loop requeues by the lease instead.
        task_acks_late=False,
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
        # Events need a broadcast exchange: Redis has one; the embedded
        # filesystem broker is for one machine and needs no monitor.
        worker_send_task_events=bool(settings.redis_url),
        task_send_sent_event=bool(settings.redis_url),
        task_default_queue="host.default",
        task_create_missing_queues=True,
    )
    return app


# The app, made by __getattr__ below on first use (declared here, bound there).
app: Celery


def __getattr__(name: str) -> Celery:
    # Built on first use, not at import: importing this module (the API does)
    # must not read the environment or fail on a bad setting.
    if name == "app":
        from gpufleet.config import load_settings

        global app
        app = make_celery(load_settings())
        app.set_current()
        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_PRODUCERS: dict[tuple, Celery] = {}
_PRODUCERS_LOCK = threading.Lock()


def producer(settings: Settings) -> Celery:
    """One Celery app per broker, reused: its connection pool is the expensive part."""
    key = (settings.redis_url, str(broker_dir(settings)), settings.lease_s)
    with _PRODUCERS_LOCK:
        app = _PRODUCERS.get(key)
        if app is None:
            app = _PRODUCERS[key] = make_celery(settings)
        return app


def send_training(settings: Settings, training_id: uuid.UUID, host_name: str) -> None:
    """Hand a scheduled training to its host. Call only after the commit."""
    producer(settings).send_task(TASK_RUN, args=[str(training_id)], queue=host_queue(host_name))
