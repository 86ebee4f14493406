"""``/api/v1/ws``: the live stream, one WebSocket with dynamic subscriptions.

Protocol (JSON text frames):

- client → server: ``{"op": "subscribe", "channel": "gpu:a100-01:0", "since": 41, "epoch": "…"}``
  (``since``/``epoch`` only when resuming; ``"channels": [...]`` subscribes
  several), ``{"op": "unsubscribe", "channel": …}``, ``{"op": "ping"}``.
- server → client: ``hello`` (with the hub's ``epoch``), ``snapshot`` (the
  channel's whole state and its current ``seq``), ``update`` (``seq`` + 1),
  ``resumed`` (after replaying what a reconnecting client missed), ``error``
  (what to fix), ``pong``; several messages may come as one ``batch``.

Channels: ``gpu:<host>:<index>``, ``host:<name>``, ``aggregate``,
``training:<id>``. A training channel is refused (an ``error`` with ``status``
403, no snapshot) to whoever REST refuses its events and logs
(:func:`gpufleet.api.auth.training_read_refusal`). See
:mod:`gpufleet.telemetry.stream` for sequence numbers, resume and slow clients.

Authentication runs before ``accept()`` through a hook,
``app.state.ws_authenticate(websocket, settings) -> user | None`` (sync or
async); by default :func:`gpufleet.api.auth.authenticate_websocket`.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, FastAPI, WebSocket, WebSocketDisconnect
from starlette.concurrency import run_in_threadpool

from gpufleet.config import Settings
from gpufleet.events import TELEMETRY_SAMPLES, get_bus
from gpufleet.telemetry.stream import ChannelError, Client, Hub, StreamConfig
from gpufleet.telemetry.training_feed import TrainingFeed

log = logging.getLogger(__name__)

WS_PATH = "/api/v1/ws"
router = APIRouter()


def _default_authenticate(websocket: WebSocket, settings: Settings) -> Any:
    from gpufleet.api.auth import authenticate_websocket

    return authenticate_websocket(websocket, settings)


@dataclass
class LiveStream:
    hub: Hub
    feed: TrainingFeed
    unsubscribe_bus: Any = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def close(self) -> None:
        if self.unsubscribe_bus:
            self.unsubscribe_bus()
        for t in self.tasks:
            t.cancel()


def get_stream(app: FastAPI) -> LiveStream:
    """This app's hub, created on first use on the running event loop."""
    stream: LiveStream | None = getattr(app.state, "live_stream", None)
    if stream is not None:
        return stream
    settings: Settings = app.state.settings
    hub = Hub(getattr(app.state, "stream_config", None) or StreamConfig())
    hub.attach_loop(asyncio.get_running_loop())
    feed = TrainingFeed(hub, settings)
    hub.on_first_subscriber = feed.start
    # Start from what is known now, so the first snapshot is not empty.
    from gpufleet.telemetry.live import read_live_samples

    by_host: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in read_live_samples(settings):
        by_host[s.host].append(s.to_dict())
    for host, samples in by_host.items():
        hub.ingest({"host": host, "samples": samples})
    if "aggregate" not in hub.channels:
        hub.publish("aggregate", hub.aggregate_state())  # an empty fleet is a state too
    stream = LiveStream(hub, feed)
    stream.unsubscribe_bus = get_bus(settings).subscribe(TELEMETRY_SAMPLES, hub.on_bus_message)

    async def expire() -> None:
        while True:
            await asyncio.sleep(30)
            hub.expire_idle()

    stream.tasks.append(asyncio.get_running_loop().create_task(expire()))
    stream.tasks.append(asyncio.get_running_loop().create_task(hub.watchdog()))
    app.state.live_stream = stream
    return stream


def _error(client: Client, message: str, **extra: Any) -> None:
    client.enqueue("", json.dumps({"type": "error", "message": message, **extra}))


def _read_refusal(stream: LiveStream, settings: Settings, user: Any, name: str) -> str | None:
    """Why ``user`` may not watch ``name``: a training channel carries what REST's events and logs do."""
    if not name.startswith("training:"):
        return None
    from gpufleet.api.readers import training_read_refusal

    return training_read_refusal(settings, user, stream.feed.owner(name))


async def _handle(stream: LiveStream, client: Client, raw: str, settings: Settings, user: Any) -> None:
    try:
        msg = json.loads(raw)
    except ValueError:
        _error(client, 'frames must be JSON objects such as {"op": "subscribe", "channel": "aggregate"}')
        return
    if not isinstance(msg, dict):
        _error(client, 'frames must be JSON objects such as {"op": "subscribe", "channel": "aggregate"}')
        return
    op = msg.get("op")
    if op == "ping":
        client.enqueue("", json.dumps({"type": "pong"}))
        return
    if op not in ("subscribe", "unsubscribe"):
        _error(client, f"unknown op {op!r}; use subscribe, unsubscribe or ping")
        return
    names = msg.get("channels") if "channels" in msg else [msg.get("channel")]
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        _error(client, f"{op} needs \"channel\": a name, or \"channels\": a list of names")
        return
    since = msg.get("since")
    if since is not None and (not isinstance(since, int) or isinstance(since, bool) or since < 0):
        _error(client, "since must be the last seq you received (an integer >= 0)")
        return
    epoch = msg.get("epoch")
    for name in names:
        if op == "unsubscribe":
            stream.hub.unsubscribe(client, name)
            client.enqueue(name, json.dumps({"type": "unsubscribed", "channel": name}))
            continue
        try:
            await stream.feed.prepare(name)
            if client.closed:
                return
            refused = _read_refusal(stream, settings, user, name)
            if refused is not None:
                _error(client, refused, channel=name, status=403)
                continue
            stream.hub.subscribe(client, name, since=since, epoch=epoch if isinstance(epoch, str) else None)
        except ChannelError as exc:
            _error(client, str(exc), channel=name)


# How often an open stream re-checks its user and token or session: revoking a
# token, disabling a user or ending a session closes its streams within this
# (plus one query).
RECHECK_S = 2.0


def _still_valid(settings: Settings, user: Any) -> str | None:
    """Why ``user``'s credentials (its browser session, or its token) no longer hold, or None."""
    from gpufleet.db.session import session_scope
    from gpufleet.users.signin import check_session
    from gpufleet.users.tokens import check_session_owner

    with session_scope(settings) as sess:
        if getattr(user, "session_id", None) is not None:
            session_owner = check_session(sess, user.session_id, None)
            return session_owner if isinstance(session_owner, str) else None
        token_owner = check_session_owner(sess, user.id, user.token_id)
    return token_owner if isinstance(token_owner, str) else None


async def _watch_credentials(websocket: WebSocket, settings: Settings, user: Any, client: Client) -> None:
    if getattr(user, "id", None) is None:
        return  # the implicit local admin has no token to revoke
    while not client.closed:
        await asyncio.sleep(RECHECK_S)
        try:
            reason = await run_in_threadpool(_still_valid, settings, user)
        except Exception as exc:  # noqa: BLE001 - a database hiccup is not a revocation
            log.debug("stream of %s: credentials not re-checked (%s)", getattr(user, "name", "?"), exc)
            continue
        if reason is not None:
            client.closed = True
            try:
                await websocket.close(code=1008, reason=reason[:120])
            except RuntimeError:
                pass  # already closing
            return


@router.websocket(WS_PATH)
async def live_stream(websocket: WebSocket) -> None:
    settings: Settings = websocket.app.state.settings
    hook = getattr(websocket.app.state, "ws_authenticate", None) or _default_authenticate
    if inspect.iscoroutinefunction(hook):
        user = await hook(websocket, settings)
    else:
        # A synchronous hook may read the database (tickets, users): keep it
        # off the event loop so one sign-in never stalls every stream.
        user = await run_in_threadpool(hook, websocket, settings)
    if user is None:
        await websocket.close(code=1008, reason="sign in first (Authorization: Bearer, session cookie or ticket from "
                                                  "/api/v1/auth/ws-ticket)")
        return
    await websocket.accept()
    stream = get_stream(websocket.app)

    async def close(code: int, reason: str) -> None:
        await websocket.close(code=code, reason=reason)

    # Every frame goes through ASGI ``send``: uvicorn's flow control makes a
    # client that stops reading wait in its own sender task, never the hub.
    client = Client(stream.hub, websocket.send_text, close)
    sender = client.start()
    watcher = asyncio.get_running_loop().create_task(_watch_credentials(websocket, settings, user, client))
    reader = asyncio.get_running_loop().create_task(_read(websocket, stream, client, settings, user))
    client.enqueue("", json.dumps({"type": "hello", "epoch": stream.hub.epoch,
                                   "channels": "gpu:<host>:<index>, host:<name>, aggregate, training:<id>"}))
    try:
        # The client leaves (reader done) or the server cut it off (sender done,
        # e.g. too slow): either way this connection is over.
        await asyncio.wait({reader, sender}, return_when=asyncio.FIRST_COMPLETED)
        if reader.done():
            reader.result()  # a failure in handling a frame is the app's error, as uvicorn should log
    finally:
        client.closed = True
        stream.hub.detach(client)
        for task in (watcher, reader, sender):
            task.cancel()


async def _read(websocket: WebSocket, stream: LiveStream, client: Client, settings: Settings, user: Any) -> None:
    try:
        while not client.closed:
            await _handle(stream, client, await websocket.receive_text(), settings, user)
    except (WebSocketDisconnect, RuntimeError):
        pass
