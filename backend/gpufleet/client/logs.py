"""The client's calls for a training's log (mixed into ``gpufleet.client.Client``)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from gpufleet import wire
from gpufleet.db import statuses

if TYPE_CHECKING:
    from gpufleet.wire.trainings import TrainingLogPublic

if TYPE_CHECKING:
    from gpufleet.wire.trainings import TrainingPublic

    TrainingRef = uuid.UUID | str | TrainingPublic

API = "/api/v1"
FINAL_STATUSES = frozenset(statuses.FINAL_STATUSES)
LOG_PARTS_WAIT_S = 60.0  # how long a followed log waits for other hosts' parts after the training ended


class LogCalls:
    """Needs the client's ``_get``, ``_sleep``, ``training_id`` and ``get_training``."""

    _get: Any
    _sleep: Any
    training_id: Any
    get_training: Any

    def log_chunk(self, training: TrainingRef, *, offset: int | None = None,
                  tail: int | None = None) -> TrainingLogPublic:
        """One read of the log: from byte ``offset``, or the last ``tail`` lines."""
        return self._get(wire.TrainingLogPublic, f"{API}/trainings/{self.training_id(training)}/logs",
                         offset=offset, tail=tail)

    def logs(self, training: TrainingRef, *, follow: bool = False, tail: int | None = None,
             poll_s: float = 1.0) -> Iterator[str]:
        """The log's text in chunks; with ``follow``, until the training ends and its log is read to the end."""
        tid = self.training_id(training)
        chunk = self.log_chunk(tid, tail=tail) if tail is not None else self.log_chunk(tid, offset=0)
        if chunk.text:
            yield chunk.text
        offset = chunk.next_offset
        ended_at: float | None = None
        while follow:
            done, ended_at = self._log_done(tid, ended_at)
            chunk = self.log_chunk(tid, offset=offset)
            if chunk.next_offset < offset:  # the server shortened the log to keep it bounded
                chunk = self.log_chunk(tid, offset=0)
            if chunk.text:
                yield chunk.text
            offset = chunk.next_offset
            if done and offset >= chunk.size:
                return
            if not chunk.text:
                self._sleep(poll_s)

    def _log_done(self, tid: uuid.UUID, ended_at: float | None) -> tuple[bool, float | None]:
        """Whether the training ended and each of its hosts sent the end of its log (waited on a minute at most).

        A training across hosts ends with rank 0's host; another host's part ends, and its log is sent,
        just after.
        """
        t = self.get_training(tid)
        if t.status not in FINAL_STATUSES:
            return False, None
        ended_at = ended_at if ended_at is not None else time.monotonic()
        parts_running = any(h.node_rank > 0 and h.status == "running" for h in t.hosts or [])
        return not parts_running or time.monotonic() - ended_at > LOG_PARTS_WAIT_S, ended_at
