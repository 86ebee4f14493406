"""The hub without a network: a lagging client skips to the newest state; idle channels."""

from __future__ import annotations

import asyncio
import json

import pytest

from gpufleet.telemetry.stream import ChannelError, Client, Hub, StreamConfig, parse_channel


def last_u(frames: list[str]) -> int | None:
    """The ``u`` of the newest message in ``frames``, or None."""
    if not frames:
        return None
    m = json.loads(frames[-1])
    return (m["messages"][-1] if m["type"] == "batch" else m)["data"]["u"]


async def until(pred, timeout: float = 30.0) -> None:
    """Let the loop run until ``pred()`` holds (the assertions after say what was wrong if it never does)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not pred() and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.005)


def test_a_lagging_client_skips_to_the_newest_state_and_others_get_everything():
    async def scenario():
        hub = Hub(StreamConfig(outbox_size=4, send_timeout_s=30))
        hub.attach_loop(asyncio.get_running_loop())
        gate = asyncio.Event()
        slow_got, fast_got = [], []

        async def slow_send(text):
            await gate.wait()  # a client whose socket is full
            slow_got.append(text)

        async def fast_send(text):
            fast_got.append(text)

        async def close(code, reason):
            pass

        slow, fast = Client(hub, slow_send, close), Client(hub, fast_send, close)
        slow.start()
        fast.start()
        hub.publish("gpu:h:0", {"u": 0})
        hub.subscribe(slow, "gpu:h:0")
        hub.subscribe(fast, "gpu:h:0")
        await until(lambda: slow.sending_since is not None)  # stuck sending its snapshot
        for i in range(1, 21):
            hub.publish("gpu:h:0", {"u": i})
            await asyncio.sleep(0)
        await until(lambda: last_u(fast_got) == 20)
        gate.set()
        await until(lambda: last_u(slow_got) == 20)
        slow.closed = fast.closed = True
        slow.task.cancel()
        fast.task.cancel()
        return slow, slow_got, fast_got

    slow, slow_got, fast_got = asyncio.run(scenario())

    def msgs(frames):
        out = []
        for f in frames:
            m = json.loads(f)
            out += m["messages"] if m["type"] == "batch" else [m]
        return out

    fast_updates = [m["data"]["u"] for m in msgs(fast_got) if m["type"] == "update"]
    assert fast_updates == list(range(1, 21))
    slow_msgs = msgs(slow_got)
    assert slow.skipped >= 1
    skipped = [m for m in slow_msgs if m.get("skipped")]
    assert skipped and skipped[-1]["type"] == "snapshot" and skipped[-1]["data"]["u"] >= 17
    # Whatever it got last is the newest state: it is never left behind on old data.
    assert slow_msgs[-1]["data"]["u"] == 20


def test_channel_names_are_checked():
    assert parse_channel("gpu:a100-01:3") == ("gpu", {"host": "a100-01", "index": 3})
    assert parse_channel("host:a100-01") == ("host", {"host": "a100-01"})
    assert parse_channel("aggregate") == ("aggregate", {})
    for bad in ("gpu:a100-01", "gpu::1", "training:42", "metrics", ""):
        with pytest.raises(ChannelError):
            parse_channel(bad)


def test_an_unwatched_channel_keeps_state_but_a_resume_across_the_gap_gets_a_snapshot():
    hub = Hub(StreamConfig(idle_channel_s=0))
    sent = []

    class Stub:
        def __init__(self):
            self.channels, self.resync = set(), set()

        def enqueue(self, ch, text):
            sent.append(json.loads(text))

    c = Stub()
    hub.publish("aggregate", {"v": 1})  # nobody watches yet: state, no numbers
    hub.subscribe(c, "aggregate")
    first = sent[-1]
    assert first["type"] == "snapshot" and first["data"] == {"v": 1}
    hub.publish("aggregate", {"v": 2})
    last_seen = sent[-1]["seq"]
    hub.unsubscribe(c, "aggregate")
    assert hub.expire_idle() == ["aggregate"]
    hub.publish("aggregate", {"v": 3})  # not numbered, not buffered
    sent.clear()
    hub.subscribe(c, "aggregate", since=last_seen, epoch=hub.epoch)
    assert [m["type"] for m in sent] == ["snapshot"] and sent[0]["data"] == {"v": 3}
