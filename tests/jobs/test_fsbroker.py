"""The embedded broker never shows a consumer a message that is not whole."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from gpufleet.config import Settings
from gpufleet.jobs.celery_app import broker_dir, make_celery

MESSAGES = 400


def _scan(folder: Path, stop: threading.Event, seen: list[int], torn: list[str]) -> None:
    """Read every message file the moment it is listed, as a consumer would."""
    while not stop.is_set():
        for name in os.listdir(folder):
            if not name.endswith(".msg"):
                continue
            try:
                body = (folder / name).read_bytes()
            except FileNotFoundError:
                continue  # taken by the consumer meanwhile
            seen[0] += 1
            try:
                json.loads(body)
            except ValueError:
                torn.append(f"{name}: {body[:40]!r}")


def test_messages_appear_whole_while_a_consumer_drains_them(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    app = make_celery(settings)
    folder = broker_dir(settings) / "queue"
    stop = threading.Event()
    seen, torn = [0], []
    scanner = threading.Thread(target=_scan, args=(folder, stop, seen, torn), daemon=True)
    received: list[int] = []
    with app.connection_for_write() as conn:
        assert type(conn.transport).__module__ == "gpufleet.jobs.fsbroker"
        queue = conn.SimpleQueue("host.test")

        def produce() -> None:
            with app.connection_for_write() as c2:
                q2 = c2.SimpleQueue("host.test")
                for i in range(MESSAGES):
                    q2.put({"n": i, "pad": "x" * 2000})
                q2.close()

        scanner.start()
        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        while len(received) < MESSAGES:
            msg = queue.get(timeout=60)
            received.append(msg.payload["n"])
            msg.ack()
        producer.join(timeout=60)
        queue.close()
    stop.set()
    scanner.join(timeout=10)
    assert torn == []
    assert seen[0] > 0
    assert sorted(received) == list(range(MESSAGES))
    # Nothing half-written is left behind.
    assert [p.name for p in folder.iterdir()] == []


def test_an_unreadable_message_is_skipped_and_the_next_one_delivered(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    app = make_celery(settings)
    folder = broker_dir(settings) / "queue"
    with app.connection_for_write() as conn:
        # A queue name of its own: kombu keeps per-queue state for the whole process.
        queue = conn.SimpleQueue("host.other")
        # What a full disk could have left under an older version: an empty message.
        (folder / "0_torn.host.other.msg").write_bytes(b"")
        queue.put({"n": 1})
        msg = queue.get(timeout=30)
        assert msg.payload == {"n": 1}
        msg.ack()
        queue.close()
