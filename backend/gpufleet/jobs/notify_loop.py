"""The thread that sends webhooks: beside the scheduler, never inside it.

Every ``POLL_S`` it reads new ``training_events`` into deliveries and sends
the due ones (``gpufleet.notify.outbox``), a few at a time on a small pool of
its own, so a slow or dead receiver delays only other webhooks' deliveries,
never a scheduler pass or a request. Every server process may run one: the
outbox's compare-and-set writes keep them from sending a delivery twice at once.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx

from gpufleet.config import StoreSettings, WebhookSettings
from gpufleet.notify import outbound, outbox

log = logging.getLogger(__name__)

POLL_S = 1.0


def run_once(store_settings: StoreSettings, webhook_settings: WebhookSettings, http: httpx.Client,
             pool: ThreadPoolExecutor) -> int:
    outbox.fan_out(store_settings)
    return outbox.send_due(store_settings, webhook_settings, http, pool)


def start(store_settings: StoreSettings, webhook_settings: WebhookSettings, stop: threading.Event,
          poll_s: float = POLL_S) -> threading.Thread:
    def run() -> None:
        warned = False
        policy = outbound.Policy(webhook_settings.webhook_allowed_networks)
        with outbound.client(policy, webhook_settings.webhook_timeout_s) as http, \
                ThreadPoolExecutor(4, thread_name_prefix="gpufleet-webhook") as pool:
            while not stop.wait(poll_s):
                try:
                    run_once(store_settings, webhook_settings, http, pool)
                    warned = False
                except Exception as exc:  # noqa: BLE001 - a database blip must not end notifications
                    if not warned:
                        log.warning("webhooks: cannot read or send deliveries (retrying): %s", exc)
                        warned = True

    t = threading.Thread(target=run, name="gpufleet-webhooks", daemon=True)
    t.start()
    return t
