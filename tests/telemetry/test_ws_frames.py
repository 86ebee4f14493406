"""Every frame the live stream sends is one of the models the OpenAPI document names (gpufleet.wire.live)."""

from __future__ import annotations

import json
import time

from pydantic import TypeAdapter
from websockets.sync.client import connect

from gpufleet.config import load_settings
from gpufleet.db.session import upgrade_database
from gpufleet.telemetry.live import LOCAL
from gpufleet.wire.live import LiveMessage, LiveRequest

from support.servers import serve_inprocess

from .wsutil import build_app, publish

FRAME = TypeAdapter(LiveMessage)


def test_every_kind_of_frame_validates_against_its_model(tmp_path) -> None:
    s = load_settings(data_dir=tmp_path / "d")
    upgrade_database(s)
    LOCAL.clear()
    app = build_app(s)
    raw: list[str] = []

    def read_until(ws, kind: str) -> dict:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for text in raw:
                frame = json.loads(text)
                inner = frame["messages"] if frame["type"] == "batch" else [frame]
                if any(m["type"] == kind for m in inner):
                    return frame
            raw.append(ws.recv(timeout=max(0.01, deadline - time.monotonic())))
        raise AssertionError(f"no {kind} frame; got {raw[-3:]}")

    def send(ws, **op) -> None:
        TypeAdapter(LiveRequest).validate_python(op)  # what the dashboard sends is a LiveRequest too
        ws.send(json.dumps(op))

    with serve_inprocess(app) as srv:
        with connect(f"ws://{srv.addr}/api/v1/ws") as ws:
            epoch = read_until(ws, "hello")["epoch"]
            hub = app.state.live_stream.hub
            publish(s, "h1", 1, 1.0)
            deadline = time.monotonic() + 30
            while "gpu:h1:0" not in hub.channels and time.monotonic() < deadline:
                time.sleep(0.02)
            send(ws, op="subscribe", channel="gpu:h1:0")
            read_until(ws, "snapshot")
            publish(s, "h1", 1, 2.0)
            seen = read_until(ws, "update")
            last = (seen["messages"][-1] if seen["type"] == "batch" else seen)["seq"]
            send(ws, op="ping")
            read_until(ws, "pong")
            send(ws, op="unsubscribe", channel="gpu:h1:0")
            read_until(ws, "unsubscribed")
            ws.send(json.dumps({"op": "shout"}))
            read_until(ws, "error")
        with connect(f"ws://{srv.addr}/api/v1/ws") as ws:
            send(ws, op="subscribe", channel="gpu:h1:0", since=last, epoch=epoch)
            read_until(ws, "resumed")
    kinds = set()
    for text in raw:
        frame = FRAME.validate_json(text)
        kinds |= {m.type for m in getattr(frame, "messages", [frame])}
    assert kinds >= {"hello", "snapshot", "update", "pong", "unsubscribed", "error", "resumed"}
