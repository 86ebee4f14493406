"""The live stream over a real server: snapshots, updates, resume, slow clients, trainings."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
from websockets.sync.client import connect

from gpufleet.config import load_settings
from gpufleet.db.models import Host, Training, TrainingEvent, TrainingMetric
from gpufleet.db.session import session_scope, upgrade_database
from gpufleet.telemetry.live import LOCAL
from gpufleet.telemetry.stream import StreamConfig

from support.servers import serve_inprocess

from .wsutil import RawNeverReader, build_app, messages, publish


@pytest.fixture
def embedded(tmp_path):
    s = load_settings(data_dir=tmp_path / "d")
    upgrade_database(s)
    LOCAL.clear()
    return s


class Reader:
    """Collects every message of one connection, in order."""

    def __init__(self, ws):
        self.ws = ws
        self.got = []

    def until(self, pred, timeout=5.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for m in self.got:
                if pred(m):
                    return m
            try:
                self.got += messages(self.ws.recv(timeout=max(0.01, deadline - time.monotonic())))
            except TimeoutError:
                break
        raise AssertionError(f"no matching message; got {self.got[-5:]}")

    def send(self, **op):
        self.ws.send(json.dumps(op))


def wait_until(pred, timeout=30.0):
    """Poll ``pred`` until it holds; what follows asserts what it was waiting for."""
    deadline = time.monotonic() + timeout
    while not pred() and time.monotonic() < deadline:
        time.sleep(0.02)


def updates(msgs, channel):
    return [m for m in msgs if m.get("channel") == channel and m["type"] == "update"]


def test_snapshot_updates_and_resume_without_missing_anything(embedded):
    s = embedded
    app = build_app(s)
    with serve_inprocess(app) as srv:
        with connect(f"ws://{srv.addr}/api/v1/ws") as ws:
            r = Reader(ws)
            epoch = r.until(lambda m: m["type"] == "hello")["epoch"]
            hub = app.state.live_stream.hub
            publish(s, "h1", 2, 1.0)
            wait_until(lambda: "gpu:h1:0" in hub.channels and "aggregate" in hub.channels
                       and hub.channels["aggregate"].state["fleet"]["gpu_count"] == 2)
            r.send(op="subscribe", channels=["gpu:h1:0", "aggregate"])
            snap = r.until(lambda m: m["type"] == "snapshot" and m["channel"] == "gpu:h1:0")
            agg = r.until(lambda m: m["type"] == "snapshot" and m["channel"] == "aggregate")
            assert snap["data"]["utilization"] == 1.0 and snap["epoch"] == epoch
            assert agg["data"]["fleet"]["gpu_count"] == 2
            for v in (2.0, 3.0, 4.0):
                publish(s, "h1", 2, v)
            r.until(lambda m: m.get("channel") == "aggregate" and m["type"] == "update"
                    and m["data"]["fleet"]["average_utilization"] == 4.0)
            gpu = updates(r.got, "gpu:h1:0")
            assert [m["data"]["utilization"] for m in gpu] == [2.0, 3.0, 4.0]
            assert [m["seq"] for m in gpu] == [snap["seq"] + 1, snap["seq"] + 2, snap["seq"] + 3]
            last_gpu, last_agg = gpu[-1]["seq"], updates(r.got, "aggregate")[-1]["seq"]
        # Disconnected: the fleet moves on.
        for v in (5.0, 6.0, 7.0):
            publish(s, "h1", 2, v)
        wait_until(lambda: hub.channels["gpu:h1:0"].seq == last_gpu + 3
                   and hub.channels["aggregate"].seq == last_agg + 3)
        with connect(f"ws://{srv.addr}/api/v1/ws") as ws:
            r = Reader(ws)
            r.send(op="subscribe", channel="gpu:h1:0", since=last_gpu, epoch=epoch)
            r.send(op="subscribe", channel="aggregate", since=last_agg, epoch=epoch)
            r.until(lambda m: m["type"] == "resumed" and m["channel"] == "aggregate")
            publish(s, "h1", 2, 8.0)
            r.until(lambda m: m.get("channel") == "gpu:h1:0" and m["type"] == "update"
                    and m["data"]["utilization"] == 8.0)
            assert not [m for m in r.got if m["type"] == "snapshot"]
            gpu = updates(r.got, "gpu:h1:0")
            assert [m["data"]["utilization"] for m in gpu] == [5.0, 6.0, 7.0, 8.0]
            assert [m["seq"] for m in gpu] == list(range(last_gpu + 1, last_gpu + 5))
            aggs = updates(r.got, "aggregate")
            assert [m["data"]["fleet"]["average_utilization"] for m in aggs] == [5.0, 6.0, 7.0, 8.0]
            # A stale epoch (another API process) gets a snapshot, not a wrong replay.
            r.got.clear()
            r.send(op="unsubscribe", channel="gpu:h1:0")
            r.send(op="subscribe", channel="gpu:h1:0", since=1, epoch="other")
            assert r.until(lambda m: m["type"] == "snapshot")["data"]["utilization"] == 8.0


def test_bad_subscriptions_get_errors_that_say_what_to_fix(embedded):
    s = embedded
    with session_scope(s) as sess:
        sess.add(Host(name="h1"))
    app = build_app(s)
    with serve_inprocess(app) as srv, connect(f"ws://{srv.addr}/api/v1/ws") as ws:
        r = Reader(ws)
        publish(s, "h1", 2, 1.0)
        # The hub takes the batch off the bus in the server's loop; the error names the GPUs it knows.
        hub = app.state.live_stream.hub
        wait_until(lambda: {("h1", 0), ("h1", 1)} <= set(hub.latest))
        r.send(op="subscribe", channel="gpu:h1:9")
        assert "GPU 9 does not exist on host h1; it has GPUs 0–1" in r.until(lambda m: m["type"] == "error")["message"]
        r.got.clear()
        r.send(op="subscribe", channel="gpus")
        assert "channels are gpu:<host>:<index>" in r.until(lambda m: m["type"] == "error")["message"]
        r.got.clear()
        r.send(op="subscribe", channel="host:nope")
        assert "unknown host 'nope'" in r.until(lambda m: m["type"] == "error")["message"]
        r.got.clear()
        r.send(op="subscribe", channel=f"training:{uuid.uuid4()}")
        assert "does not exist" in r.until(lambda m: m["type"] == "error")["message"]
        r.got.clear()
        ws.send("not json")
        assert "JSON" in r.until(lambda m: m["type"] == "error")["message"]
        r.got.clear()
        r.send(op="subscribe", channel="aggregate", since=-3)
        assert "since" in r.until(lambda m: m["type"] == "error")["message"]


@pytest.mark.slow
def test_a_client_that_never_reads_does_not_slow_the_others(embedded):
    s = embedded
    app = build_app(s, StreamConfig(outbox_size=16, send_timeout_s=1.0))
    with serve_inprocess(app) as srv:
        publish(s, "big", 64, 0.0, pad=400)
        with connect(f"ws://{srv.addr}/api/v1/ws") as ws:
            r = Reader(ws)
            r.send(op="subscribe", channels=["host:big", "aggregate"])
            r.until(lambda m: m["type"] == "snapshot" and m["channel"] == "host:big")
            stuck = RawNeverReader(srv.addr, ["host:big", "gpu:big:0", "aggregate"])
            hub = app.state.live_stream.hub
            wait_until(lambda: hub.subscriber_count() == 5)
            assert hub.subscriber_count() == 5
            stop = threading.Event()

            def read():
                while not stop.is_set():
                    try:
                        frame = ws.recv(timeout=0.2)
                    except TimeoutError:
                        continue
                    for m in messages(frame):
                        if m["type"] == "update":
                            r.got.append(m)

            t = threading.Thread(target=read)
            t.start()
            # ~60 KB per host message at 25 Hz: the stuck client's socket fills within a second.
            for i in range(100):
                publish(s, "big", 64, float(i + 1), pad=400)
                time.sleep(0.04)
            # Until the reader has all 100 and the stuck client is dropped, however long that takes.
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and (
                    len(updates(r.got, "host:big")) < 100 or hub.subscriber_count() != 2):
                time.sleep(0.05)
            stop.set()
            t.join()
            stuck_gone = hub.subscriber_count() == 2
            # Its handler ended too (not left waiting for a frame that never comes): one connection is served.
            wait_until(lambda: len(srv.server.server_state.tasks) == 1)
            handlers_left = len(srv.server.server_state.tasks)
            stuck.close()
        host_updates = updates(r.got, "host:big")
        seqs = [m["seq"] for m in host_updates]
        # The reading client got every update, in order, without skips. (How quickly depends on
        # the machine: bench/ws_fanout.py --stuck 1 prints the readers' latency beside a stuck client.)
        assert len(host_updates) == 100 and seqs == list(range(seqs[0], seqs[0] + 100))
        assert not any(m.get("skipped") for m in r.got)
        # The stuck one was cut off.
        assert stuck_gone and handlers_left == 1


class RecordSends:
    """An ASGI middleware that sees every WebSocket frame the app sends, as a metering proxy would."""

    def __init__(self, app, texts):
        self.app, self.texts = app, texts

    async def __call__(self, scope, receive, send):
        async def recording(message):
            if message["type"] == "websocket.send":
                self.texts.append(message["text"])
            await send(message)

        await self.app(scope, receive, recording if scope["type"] == "websocket" else send)


def test_every_frame_goes_through_asgi_send_so_middleware_sees_it(embedded):
    s = embedded
    app = build_app(s)
    texts: list[str] = []
    app.add_middleware(RecordSends, texts=texts)
    with serve_inprocess(app) as srv, connect(f"ws://{srv.addr}/api/v1/ws") as ws:
        r = Reader(ws)
        publish(s, "mw", 1, 1.0)
        r.send(op="subscribe", channel="gpu:mw:0")
        r.until(lambda m: m["type"] == "snapshot")
        for v in (2.0, 3.0):
            publish(s, "mw", 1, v)
        r.until(lambda m: m["type"] == "update" and m["data"]["utilization"] == 3.0)
        # Every message the client got, updates included, passed through the app's send.
        seen = [m for t in texts for m in messages(t)]
        assert r.got and all(m in seen for m in r.got)
        assert [m["data"]["utilization"] for m in updates(seen, "gpu:mw:0")][-2:] == [2.0, 3.0]


def test_training_channel_streams_progress_from_the_database(embedded):
    s = embedded
    tid = uuid.uuid4()
    with session_scope(s) as sess:
        sess.add(Training(id=tid, name="sae-1", owner="alice", recipe="sae", config={}, status="running"))
        sess.flush()
        sess.add(TrainingEvent(training_id=tid, seq=1, kind="status", status="running"))
        sess.add(TrainingMetric(training_id=tid, step=10, loss=1.5, metrics={}))
    app = build_app(s)
    with serve_inprocess(app) as srv, connect(f"ws://{srv.addr}/api/v1/ws") as ws:
        r = Reader(ws)
        r.send(op="subscribe", channel=f"training:{tid}")
        snap = r.until(lambda m: m["type"] == "snapshot")
        assert snap["data"]["training"]["name"] == "sae-1"
        assert [e["seq"] for e in snap["data"]["events"]] == [1]
        assert [m["step"] for m in snap["data"]["metrics"]] == [10]
        with session_scope(s) as sess:
            sess.add(TrainingMetric(training_id=tid, step=20, loss=1.2, metrics={}))
            sess.add(TrainingEvent(training_id=tid, seq=2, kind="checkpoint", reason="step 20"))
            t = sess.get(Training, tid)
            t.step = 20
        up = r.until(lambda m: m["type"] == "update", timeout=5)
        assert [m["step"] for m in up["data"]["metrics"]] == [20]
        assert [e["seq"] for e in up["data"]["events"]] == [2]
        assert up["data"]["training"]["step"] == 20
