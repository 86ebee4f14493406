"""The live stream hub: channels, sequence numbers, resume, and per-client queues.

One hub per API process, on its event loop. It listens to the bus
(``telemetry.samples`` from every agent) and turns each host's batch into
updates on the channels ``gpu:<host>:<index>``, ``host:<name>`` and
``aggregate``; ``training:<id>`` channels are fed by
:mod:`gpufleet.telemetry.training_feed`, which tails the database.

Each message is encoded to JSON once, whatever the number of subscribers.
Every channel numbers its messages (``seq``) and keeps the last
``resume_buffer`` of them, so a client that reconnects with the last ``seq`` it
saw (and the hub's ``epoch``) gets exactly what it missed. Sequence numbers
belong to one API process: a client that reconnects to another one (its epoch
differs) gets a fresh snapshot instead.

A client owns a bounded outbox and a sender task. Publishing never waits for
a client: when an outbox is full, the client's queued updates are thrown away
and it is sent the newest state of each of its channels instead (``skipped``);
a client whose socket accepts nothing for ``send_timeout_s`` is disconnected.
Frames go through the server's ordinary send (ASGI ``websocket.send``), whose
flow control holds a client that stops reading in its own sender task.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from gpufleet.telemetry.aggregate import aggregate_by_host, compute_aggregated
from gpufleet.telemetry.sample import GPUSample

log = logging.getLogger(__name__)

CHANNEL_RE = re.compile(r"^(aggregate|gpu:(?P<gh>[^:\s]+):(?P<gi>\d+)|host:(?P<h>[^:\s]+)"
                        r"|training:(?P<t>[0-9a-fA-F-]{32,36}))$")
CHANNEL_HELP = "channels are gpu:<host>:<index>, host:<name>, aggregate and training:<id>"


class ChannelError(ValueError):
    """A channel name or subscription that cannot be served; the message says why."""


@dataclass(frozen=True)
class StreamConfig:
    outbox_size: int = 256
    resume_buffer: int = 300
    send_timeout_s: float = 5.0
    # A channel nobody watches keeps its resume buffer this long, so a client
    # that reconnects after a short break misses nothing.
    idle_channel_s: float = 300.0
    # A GPU whose host stopped reporting leaves the aggregate after this long.
    stale_after_s: float = 30.0

    def __post_init__(self) -> None:
        if self.outbox_size < 4 or self.resume_buffer < 1 or self.send_timeout_s <= 0:
            raise ValueError("outbox_size >= 4, resume_buffer >= 1 and send_timeout_s > 0 are required")


def parse_channel(name: str) -> tuple[str, dict[str, Any]]:
    m = CHANNEL_RE.match(name or "")
    if not m:
        raise ChannelError(f"unknown channel {name!r}; {CHANNEL_HELP}")
    if name == "aggregate":
        return "aggregate", {}
    if m.group("gh"):
        return "gpu", {"host": m.group("gh"), "index": int(m.group("gi"))}
    if m.group("h"):
        return "host", {"host": m.group("h")}
    try:
        return "training", {"id": uuid.UUID(m.group("t"))}
    except ValueError:
        raise ChannelError(f"{name!r}: the training id is not a UUID") from None


class Channel:
    def __init__(self, name: str, resume_buffer: int) -> None:
        self.name = name
        self.seq = 0
        self.buffer: deque[tuple[int, str]] = deque(maxlen=resume_buffer)
        self.subscribers: set[Client] = set()
        self.idle_since: float | None = time.monotonic()
        self.state: Any = None  # the newest data, what a snapshot shows


class Client:
    """One WebSocket connection: its subscriptions, outbox and sender."""

    def __init__(self, hub: Hub, send: Callable[[str], Awaitable[None]],
                 close: Callable[[int, str], Awaitable[None]]) -> None:
        self.hub = hub
        self._send = send
        self._close = close
        self.channels: set[str] = set()
        self.outbox: deque[str] = deque()
        self.resync: set[str] = set()
        self.wake = asyncio.Event()
        self.skipped = 0
        self.closed = False
        self.task: asyncio.Task[None] | None = None
        self.sending_since: float | None = None
        self.too_slow = False

    def start(self) -> asyncio.Task[None]:
        self.task = asyncio.get_running_loop().create_task(self._sender())
        return self.task

    def enqueue(self, channel: str, text: str) -> None:
        if self.closed:
            return
        if len(self.outbox) >= self.hub.config.outbox_size:
            # Behind: drop what is queued; it will get the newest state instead.
            self.outbox.clear()
            self.resync |= self.channels
            self.skipped += 1
        else:
            self.outbox.append(text)
        self.wake.set()

    async def _sender(self) -> None:
        try:
            while not self.closed:
                await self.wake.wait()
                self.wake.clear()
                frames: list[str] = []
                for ch in list(self.resync):
                    snap = self.hub.snapshot_text(ch, skipped=True)
                    if snap is not None:
                        frames.append(snap)
                self.resync.clear()
                while self.outbox:
                    frames.append(self.outbox.popleft())
                if not frames:
                    continue
                text = frames[0] if len(frames) == 1 else '{"type":"batch","messages":[' + ",".join(frames) + "]}"
                # No wait_for per send (a timer and a task each, at 1,000 sends a
                # second): the hub's watchdog cancels a send that takes too long.
                self.sending_since = time.monotonic()
                await self._send(text)
                self.sending_since = None
        except asyncio.CancelledError:
            if self.too_slow:
                log.info("disconnecting a WebSocket client that read nothing for %.0f s",
                         self.hub.config.send_timeout_s)
                await self.shutdown(1008, "too slow: the client did not read its updates")
                return
            raise
        except Exception:  # noqa: BLE001 - a broken socket ends this client only
            await self.shutdown(1011, "send failed")

    async def shutdown(self, code: int = 1000, reason: str = "") -> None:
        if self.closed:
            return
        self.closed = True
        self.hub.detach(self)
        try:
            await asyncio.wait_for(self._close(code, reason), 2.0)
        except Exception:  # noqa: BLE001 - already gone, or (too slow) not reading the close frame either
            pass


class Hub:
    def __init__(self, config: StreamConfig | None = None) -> None:
        self.config = config or StreamConfig()
        self.epoch = uuid.uuid4().hex[:12]
        self.channels: dict[str, Channel] = {}
        self.latest: dict[tuple[str, int], GPUSample] = {}
        self.received_at: dict[tuple[str, int], float] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        # Hooks set by the API: channel validation and training feeds.
        self.on_first_subscriber: Callable[[str], None] | None = None

    # -- feeding -----------------------------------------------------------------

    def attach_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def on_bus_message(self, _topic: str, message: dict[str, Any]) -> None:
        """Bus callback (any thread): hand the batch to the hub's loop."""
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.ingest, message)

    def ingest(self, message: dict[str, Any]) -> None:
        """One host's batch of samples: update its GPUs, the host and the aggregate."""
        host = message.get("host")
        if not isinstance(host, str):
            return
        now = time.monotonic()
        samples = [GPUSample.from_dict(d) for d in message.get("samples", [])]
        for key in [k for k in self.latest if k[0] == host]:
            del self.latest[key]
        for s in samples:
            self.latest[s.key] = s
            self.received_at[s.key] = now
            self.publish(f"gpu:{host}:{s.index}", s.to_dict())
        self.publish(f"host:{host}", self._host_state(host))
        self.publish("aggregate", self.aggregate_state())

    def fresh_samples(self) -> list[GPUSample]:
        cutoff = time.monotonic() - self.config.stale_after_s
        return [s for k, s in sorted(self.latest.items()) if self.received_at.get(k, 0) >= cutoff]

    def _host_state(self, host: str) -> dict[str, Any]:
        samples = [s for s in self.fresh_samples() if s.host == host]
        return {"host": host, "aggregate": compute_aggregated(samples).to_dict(),
                "gpus": [s.to_dict() for s in samples]}

    def aggregate_state(self) -> dict[str, Any]:
        samples = self.fresh_samples()
        return {"fleet": compute_aggregated(samples).to_dict(),
                "hosts": {h: a.to_dict() for h, a in aggregate_by_host(samples).items()}}

    def publish(self, name: str, data: Any) -> None:
        """Record the new state of a channel and send it to its subscribers."""
        ch = self.channels.get(name)
        if ch is None:
            # Nobody has watched this channel: keep the state for a future
            # snapshot, but no numbered history.
            ch = self.channels[name] = Channel(name, self.config.resume_buffer)
            ch.idle_since = None if name.startswith("training:") else -1.0
        ch.state = data
        if ch.idle_since == -1.0:
            return
        ch.seq += 1
        text = json.dumps({"type": "update", "channel": name, "seq": ch.seq, "epoch": self.epoch,
                           "sent": time.time(), "data": data}, default=str)
        ch.buffer.append((ch.seq, text))
        for c in list(ch.subscribers):
            c.enqueue(name, text)

    def set_state(self, name: str, data: Any) -> None:
        """Replace a channel's snapshot state without sending an update."""
        ch = self.channels.get(name)
        if ch is not None:
            ch.state = data

    # -- subscribing ---------------------------------------------------------------

    def snapshot_text(self, name: str, *, skipped: bool = False) -> str | None:
        ch = self.channels.get(name)
        if ch is None:
            return None
        msg: dict[str, Any] = {"type": "snapshot", "channel": name, "seq": ch.seq, "epoch": self.epoch,
                               "sent": time.time(), "data": ch.state}
        if skipped:
            msg["skipped"] = True
        return json.dumps(msg, default=str)

    def subscribe(self, client: Client, name: str, since: int | None = None, epoch: str | None = None) -> None:
        """Subscribe ``client``; queue either the missed updates (resume) or a snapshot."""
        parse_channel(name)
        ch = self.channels.get(name)
        if ch is None:
            ch = self.channels[name] = Channel(name, self.config.resume_buffer)
        if ch.idle_since == -1.0:
            # Numbered from now on. Updates went by unnumbered, so skip a number:
            # a client resuming from an older seq gets a snapshot, not a gap.
            ch.seq += 1
            ch.idle_since = None
        first = not ch.subscribers
        ch.subscribers.add(client)
        ch.idle_since = None
        client.channels.add(name)
        if first and self.on_first_subscriber is not None:
            self.on_first_subscriber(name)
        resumable = (
            since is not None and (epoch is None or epoch == self.epoch) and 0 <= since <= ch.seq
            and (since == ch.seq or (ch.buffer and ch.buffer[0][0] <= since + 1))
        )
        if resumable and since is not None:
            for seq, text in ch.buffer:
                if seq > since:
                    client.enqueue(name, text)
            client.enqueue(name, json.dumps({"type": "resumed", "channel": name, "from": since,
                                             "seq": ch.seq, "epoch": self.epoch}))
        else:
            snap = self.snapshot_text(name)
            if snap is not None:
                client.enqueue(name, snap)

    def unsubscribe(self, client: Client, name: str) -> None:
        client.channels.discard(name)
        client.resync.discard(name)
        ch = self.channels.get(name)
        if ch is not None:
            ch.subscribers.discard(client)
            if not ch.subscribers:
                ch.idle_since = time.monotonic()

    def detach(self, client: Client) -> None:
        for name in list(client.channels):
            self.unsubscribe(client, name)

    def expire_idle(self) -> list[str]:
        """Forget numbered history of channels nobody watched for ``idle_channel_s``."""
        cutoff = time.monotonic() - self.config.idle_channel_s
        gone = [n for n, ch in self.channels.items()
                if not ch.subscribers and ch.idle_since not in (None, -1.0) and ch.idle_since < cutoff]
        for n in gone:
            ch = self.channels[n]
            if n.startswith("training:"):
                del self.channels[n]
            else:
                ch.buffer.clear()
                ch.idle_since = -1.0
        return gone

    def check_slow_clients(self) -> int:
        """Cut off clients whose current send has waited longer than ``send_timeout_s``."""
        cutoff = time.monotonic() - self.config.send_timeout_s
        clients = {c for ch in self.channels.values() for c in ch.subscribers}
        n = 0
        for c in clients:
            if c.sending_since is not None and c.sending_since < cutoff and not c.too_slow and c.task:
                c.too_slow = True
                c.task.cancel()
                n += 1
        return n

    async def watchdog(self, period_s: float | None = None) -> None:
        period = period_s or min(1.0, self.config.send_timeout_s / 4)
        while True:
            await asyncio.sleep(period)
            self.check_slow_clients()

    def subscriber_count(self) -> int:
        return sum(len(ch.subscribers) for ch in self.channels.values())
