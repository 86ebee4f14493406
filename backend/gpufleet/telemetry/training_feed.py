"""Feeding ``training:<id>`` channels from the database, and checking channel names against it.

Training progress is written by the jobs worker into ``training_events`` (by
``seq``) and ``training_metrics`` (by ``step``). Tailing those tables from the
API process works the same in the embedded default and in a fleet, and the
database is the truth anyway. One tail task runs per watched training; it
stops when the training's last subscriber leaves and picks up from where it
stopped when someone subscribes again, so no event is skipped.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.config import StoreSettings
from gpufleet.db.models import GPU, Host, Training, TrainingEvent, TrainingMetric
from gpufleet.db.session import session_factory
from gpufleet.telemetry.stream import ChannelError, Hub, parse_channel

log = logging.getLogger(__name__)

SNAPSHOT_EVENTS = 50
SNAPSHOT_METRICS = 200


def training_public(t: Training) -> dict[str, Any]:
    return {
        "id": str(t.id), "name": t.name, "owner": t.owner, "recipe": t.recipe, "status": t.status,
        "status_reason": t.status_reason, "step": t.step, "max_steps": t.max_steps, "last_loss": t.last_loss,
        "gpu_ids": t.gpu_ids, "world_size": t.world_size, "distributed": t.distributed,
        "restarts": t.restarts, "created_at": t.created_at, "started_at": t.started_at,
        "finished_at": t.finished_at, "wait_reason": t.wait_reason,
    }


def event_public(e: TrainingEvent) -> dict[str, Any]:
    return {"seq": e.seq, "time": e.time, "kind": e.kind, "status": e.status, "reason": e.reason,
            "user": e.user, "data": e.data}


def metric_public(m: TrainingMetric) -> dict[str, Any]:
    return {"step": m.step, "time": m.time, "loss": m.loss, "metrics": m.metrics,
            "rank_step_times": m.rank_step_times}


def _load_snapshot(sess: Session, tid: uuid.UUID) -> dict[str, Any] | None:
    t = sess.get(Training, tid)
    if t is None:
        return None
    events = sess.scalars(select(TrainingEvent).where(TrainingEvent.training_id == tid)
                          .order_by(TrainingEvent.seq.desc()).limit(SNAPSHOT_EVENTS)).all()
    metrics = sess.scalars(select(TrainingMetric).where(TrainingMetric.training_id == tid)
                           .order_by(TrainingMetric.step.desc()).limit(SNAPSHOT_METRICS)).all()
    return {"training": training_public(t), "events": [event_public(e) for e in reversed(events)],
            "metrics": [metric_public(m) for m in reversed(metrics)]}


def _load_since(sess: Session, tid: uuid.UUID, seq: int, step: int) -> dict[str, Any]:
    t = sess.get(Training, tid)
    events = sess.scalars(select(TrainingEvent).where(TrainingEvent.training_id == tid, TrainingEvent.seq > seq)
                          .order_by(TrainingEvent.seq)).all()
    metrics = sess.scalars(select(TrainingMetric).where(TrainingMetric.training_id == tid,
                                                        TrainingMetric.step > step)
                           .order_by(TrainingMetric.step)).all()
    return {"training": training_public(t) if t else None, "events": [event_public(e) for e in events],
            "metrics": [metric_public(m) for m in metrics]}


class TrainingFeed:
    def __init__(self, hub: Hub, settings: StoreSettings, poll_s: float = 1.0) -> None:
        self.hub = hub
        self.settings = settings
        self.poll_s = poll_s
        self._tasks: dict[str, asyncio.Task[None]] = {}
        # channel -> (last event seq, last metric step) already published
        self._pos: dict[str, tuple[int, int]] = {}

    def _read(self, fn, *args):
        def run():
            with session_factory(self.settings)() as sess:
                return fn(sess, *args)

        return asyncio.to_thread(run)

    async def prepare(self, name: str) -> None:
        """Check a channel before subscribing; load a training's snapshot. Raises ChannelError."""
        kind, parts = parse_channel(name)
        if kind == "gpu":
            await self._read(_check_gpu, parts["host"], parts["index"], self.hub)
        elif kind == "host":
            await self._read(_check_host, parts["host"], self.hub)
        elif kind == "training" and (name not in self._pos or name not in self.hub.channels):
            snap = await self._read(_load_snapshot, parts["id"])
            if snap is None:
                raise ChannelError(f"training {parts['id']} does not exist")
            self.hub.publish(name, snap)  # creates the channel with its state
            self._pos[name] = (max([e["seq"] for e in snap["events"]], default=0),
                               max([m["step"] for m in snap["metrics"]], default=-1))

    def owner(self, name: str) -> str | None:
        """The owner of a prepared ``training:<id>`` channel's training (None if unknown)."""
        ch = self.hub.channels.get(name)
        training = (ch.state or {}).get("training") if ch is not None else None
        return training.get("owner") if training else None

    def start(self, name: str) -> None:
        """Hub hook: the first subscriber of ``name`` arrived."""
        if name.startswith("training:") and name not in self._tasks:
            self._tasks[name] = asyncio.get_running_loop().create_task(self._tail(name))

    async def _tail(self, name: str) -> None:
        tid = parse_channel(name)[1]["id"]
        try:
            while True:
                ch = self.hub.channels.get(name)
                if ch is None or not ch.subscribers:
                    return
                seq, step = self._pos[name]
                try:
                    new = await self._read(_load_since, tid, seq, step)
                except Exception as exc:  # noqa: BLE001 - the database may be briefly away
                    log.warning("cannot read training %s progress: %s", tid, exc)
                    await asyncio.sleep(self.poll_s * 5)
                    continue
                state = ch.state or {"training": None, "events": [], "metrics": []}
                changed = bool(new["events"] or new["metrics"]) or new["training"] != state.get("training")
                if changed:
                    self._pos[name] = (max([e["seq"] for e in new["events"]], default=seq),
                                       max([m["step"] for m in new["metrics"]], default=step))
                    self.hub.publish(name, new)
                    self.hub.set_state(name, {
                        "training": new["training"],
                        "events": (state["events"] + new["events"])[-SNAPSHOT_EVENTS:],
                        "metrics": (state["metrics"] + new["metrics"])[-SNAPSHOT_METRICS:],
                    })
                await asyncio.sleep(self.poll_s)
        finally:
            self._tasks.pop(name, None)


def _check_host(sess: Session, host: str, hub: Hub) -> None:
    if any(k[0] == host for k in hub.latest):
        return
    if sess.scalar(select(Host.id).where(Host.name == host)) is None:
        known = sorted(set(sess.scalars(select(Host.name)).all()) | {k[0] for k in hub.latest})
        raise ChannelError(f"unknown host {host!r}; known hosts: {', '.join(known) or 'none yet'}")


def _check_gpu(sess: Session, host: str, index: int, hub: Hub) -> None:
    if (host, index) in hub.latest:
        return
    _check_host(sess, host, hub)
    indexes = set(sess.scalars(select(GPU.index).join(Host).where(Host.name == host)).all())
    indexes |= {k[1] for k in hub.latest if k[0] == host}
    if index not in indexes:
        have = f"GPUs {min(indexes)}–{max(indexes)}" if indexes else "no GPUs"
        raise ChannelError(f"GPU {index} does not exist on host {host}; it has {have}")
