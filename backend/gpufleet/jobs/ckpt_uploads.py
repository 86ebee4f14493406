"""The worker's checkpoint uploads: each checkpoint the ranks reported complete goes to the store in the
background (gpufleet.ckptstore), so a step never waits on the network.

One thread per worker process takes the checkpoints in the order they came. The store down or slow
fails no training: the upload waits and is tried again (the first wait ``checkpoint_store_retry_s``,
doubled each time, at most ten minutes), an event says so once per outage, and a training keeps at
most ``checkpoint_store_max_waiting`` checkpoints waiting: a newer one replaces the oldest, since
``latest`` would only move past it. A checkpoint the training's own code deleted meanwhile is let go.
After each upload the training's store is pruned to what retention keeps. The training's code never
sees the store's credentials: they are the worker's, read from a file (ckptstore.client).
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet import ckptstore
from gpufleet.ckptstore.client import StoreUnreachable, check
from gpufleet.ckptstore.retention import Policy
from gpufleet.config import CheckpointStoreSettings, StoreSettings
from gpufleet.db.session import session_scope
from gpufleet.lifecycle.transitions import record_event

log = logging.getLogger(__name__)
_MAX_WAIT_S = 600.0
# The upload thread's nice value: hashing and sending yield to a training's ranks on the same host.
UPLOAD_NICE = 19


@dataclass
class Job:
    training: uuid.UUID
    ckpt_dir: Path
    name: str
    metrics: dict[str, float] = field(default_factory=dict)
    attempt: int | None = None
    host: str | None = None
    root: Path | None = None  # a pool's root, below which ckpt_dir is reached through no link


class Uploads:
    """A worker's queue of checkpoints to upload, and the thread that works it."""

    def __init__(self, store: ckptstore.Store, settings: CheckpointStoreSettings, db: StoreSettings):
        self.store, self.settings, self.db = store, settings, db
        self.policy = Policy(settings.checkpoint_store_keep_last, settings.checkpoint_store_keep_best_metric,
                             settings.checkpoint_store_keep_best_mode)
        self._queue: collections.deque[Job] = collections.deque()
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self.busy = False
        self._thread = threading.Thread(target=self._run, name="gpufleet-checkpoint-uploads", daemon=True)
        self._thread.start()

    def offer(self, job: Job) -> None:
        """Queue ``job``; the oldest waiting of its training is dropped past the bound."""
        dropped: Job | None = None
        with self._cond:
            mine = [j for j in self._queue if j.training == job.training]
            if len(mine) >= self.settings.checkpoint_store_max_waiting:
                dropped = mine[0]
                self._queue.remove(dropped)
            self._queue.append(job)
            self._cond.notify()
        if dropped is not None:
            self._event(dropped.training, "warning", f"checkpoint {dropped.name} was not uploaded to "
                        f"{self.store.url}: newer ones are waiting and the store is behind", {"name": dropped.name})

    def idle(self) -> bool:
        with self._cond:
            return not self._queue and not self.busy

    def close(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()

    def _run(self) -> None:
        lower_priority()
        while not self._stop.is_set():
            with self._cond:
                while not self._queue and not self._stop.is_set():
                    self._cond.wait()
                if self._stop.is_set():
                    return
                job = self._queue[0]
                self.busy = True
            try:
                self._until_uploaded(job)
            finally:
                with self._cond:
                    if self._queue and self._queue[0] is job:
                        self._queue.popleft()
                    self.busy = False

    def _until_uploaded(self, job: Job) -> None:
        wait, told = self.settings.checkpoint_store_retry_s, False
        while not self._stop.is_set():
            try:
                m = ckptstore.upload_checkpoint(self.store, str(job.training), job.ckpt_dir, job.name,
                                                metrics=job.metrics, attempt=job.attempt, host=job.host,
                                                root=job.root)
            except FileNotFoundError:
                log.info("checkpoint %s of %s is gone before its upload", job.name, job.training)
                return
            except Exception as exc:  # noqa: BLE001 - the store down, slow or refusing: retried, never fatal
                if not told:
                    self._event(job.training, "warning", f"the checkpoint store {self.store.url} is not taking "
                                f"checkpoint {job.name} ({exc}); the training goes on and the upload is retried",
                                {"name": job.name, "store": self.store.url})
                    told = True
                with self._cond:
                    if self._queue and self._queue[0] is not job:
                        return  # dropped for a newer one meanwhile
                self._stop.wait(wait)
                wait = min(wait * 2, _MAX_WAIT_S)
                continue
            self._uploaded(job, m)
            return

    def _uploaded(self, job: Job, m: ckptstore.Manifest) -> None:
        self._event(job.training, "info", f"checkpoint {job.name} uploaded to {self.store.url} "
                    f"({len(m.files)} file(s), {m.size} bytes, verified)",
                    {"name": job.name, "step": m.step, "store": self.store.url, "bytes": m.size,
                     "upload": m.upload})
        try:
            ckptstore.prune(self.store, str(job.training), self.policy)
        except Exception as exc:  # noqa: BLE001 - retention is tried again after the next upload
            log.warning("pruning the store for %s: %s", job.training, exc)

    def _event(self, tid: uuid.UUID, kind: str, reason: str, data: dict[str, Any]) -> None:
        try:
            with session_scope(self.db) as sess:
                record_event(sess, tid, kind, reason=reason, data=data)
        except Exception as exc:  # noqa: BLE001 - an event lost is no reason to stop uploading
            log.warning("event for %s: %s (%s)", tid, reason, exc)


def lower_priority() -> None:
    """This thread (alone: Linux gives each thread its own nice value) yields the CPU to the ranks."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), UPLOAD_NICE)
    except OSError:
        pass


_uploads: Uploads | None = None
_lock = threading.Lock()


def start(settings: CheckpointStoreSettings, db: StoreSettings) -> Uploads | None:
    """The worker's uploads: a wrong setting (credentials refused, no such bucket, an unreadable credentials
    file) is one clear error now (ckptstore.StoreError), not a failure at the first checkpoint; a store that
    does not answer yet is said and waited for, as during any outage. None with no store set."""
    global _uploads
    with _lock:
        if _uploads is None:
            store = ckptstore.open_store(settings)
            if store is None:
                return None
            try:
                check(store)
            except StoreUnreachable as exc:
                log.warning("%s; checkpoints wait for it and are uploaded once it answers", exc)
            _uploads = Uploads(store, settings, db)
        return _uploads


def current() -> Uploads | None:
    return _uploads


def stop() -> None:
    global _uploads
    with _lock:
        if _uploads is not None:
            _uploads.close()
        _uploads = None


def on_checkpoint(t_id: uuid.UUID, ckpt_dir: Path, attempt: int, host: str, root: Path | None = None) -> Any:
    """What the attempt's metrics sink calls for each checkpoint line: the checkpoint queued for upload
    (only one in the training's own checkpoint folder, by its name there), or None with no store set.
    ``root``: a pool's root, which ``ckpt_dir`` is below."""
    uploads = current()
    if uploads is None:
        return None

    def offer(line: dict[str, Any], loss: float | None) -> None:
        path = Path(str(line.get("path") or ""))
        if path.parent != ckpt_dir or not path.name:
            return
        uploads.offer(Job(t_id, ckpt_dir, path.name, {} if loss is None else {"loss": loss}, attempt, host, root))

    return offer
