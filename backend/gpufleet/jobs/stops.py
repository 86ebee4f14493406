"""Asking a running training to checkpoint and stop, and what its end then means.

Every stop goes the same way: SIGTERM to the launcher's group and the stop
file (``GPUFLEET_STOP_FILE``, engine/stopfile.py) for a script's ranks; the
ranks checkpoint and exit 14 within ``stop_grace_s``, else the group is
killed. The end's event says whether a checkpoint came within the grace and
the step the training will resume from.
What differs is why, and so where the training goes next:

| why | asked by | ends as |
|---|---|---|
| the worker is stopping (SIGTERM/SIGINT) | the worker process | ``queued`` (retry ``interrupted``, no restart) |
| a training of higher priority needs them | ``preempted_by`` (scheduling.preemption) | ``preempted``, then ``queued`` |
| its GPUs stayed idle (policy ``stop``) | ``reclaim_requested`` (scheduling.idle) | ``reclaimed`` |
| it ran past its ``max_runtime_s`` | the supervisor's own clock | ``failed`` |
| its processes held more than its share | the share watchdog (jobs.share_watch) | ``queued``, peak as estimate |

A training that succeeds, is cancelled or pruned during the grace keeps that end.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from gpufleet.jobs import share_watch
from gpufleet.lifecycle import outcome


@dataclass
class Stop:
    kind: str  # worker | preempt | reclaim | runtime | share
    deadline: float
    note: str  # the line for the training's log
    preempted_by: uuid.UUID | None = None
    checkpoints_before: int = 0  # checkpoints the attempt had written when the stop was asked for
    overrun: share_watch.Overrun | None = None  # what the share watchdog saw (kind share)


def requested(*, stopping: bool, state: str, preempted_by: uuid.UUID | None, max_runtime_s: int | None,
              running_s: float, grace_s: float) -> Stop | None:
    """The stop this training is asked for now, if any (the first one asked wins)."""
    deadline = time.monotonic() + grace_s
    up_to = f"(up to {grace_s:.0f}s)"
    if stopping:
        return Stop("worker", deadline, f"the worker is stopping; asking the training to checkpoint {up_to}")
    if state == "preempt":
        return Stop("preempt", deadline, f"preempted by training {preempted_by}; asking the training to "
                                         f"checkpoint {up_to}", preempted_by)
    if state == "reclaim":
        return Stop("reclaim", deadline, f"its GPUs stayed idle; asking the training to checkpoint {up_to}")
    if max_runtime_s and running_s > max_runtime_s:
        return Stop("runtime", deadline, f"the training ran past its max_runtime of {max_runtime_s}s; "
                                         f"asking it to checkpoint {up_to}")
    return None


def _saved(step: int | None, path: str | None, checkpointed: bool) -> str:
    name = f" ({Path(path).name})" if path else ""
    if not checkpointed:
        return "it wrote no new checkpoint within the grace"
    return f"it checkpointed at step {step} within the grace{name}" if step is not None else \
        f"it checkpointed within the grace{name}"


def decide(stop: Stop, d: outcome.Decision, *, stopping: bool, step: int | None, host_name: str,
           max_runtime_s: int | None, checkpointed: bool = False, path: str | None = None) -> outcome.Decision:
    """What the end of an attempt that was asked to stop means.

    ``step`` and ``path`` are the newest checkpoint's (where a resume starts),
    and ``checkpointed`` whether that checkpoint was written after the stop
    was asked for, within the grace (reported by the launcher, or found by the
    worker once the ranks were gone: :mod:`gpufleet.jobs.checkpoint_found`).
    """
    if d.status in ("succeeded", "cancelled", "pruned"):
        return d
    saved = _saved(step, path, checkpointed)
    resume = f"it will resume from step {step}" if step is not None else "it will start again from step 0"
    if stop.kind == "worker" or stopping:
        # The worker goes away whatever else was asked: the training goes back to the queue.
        return outcome.Decision("queued", f"interrupted: the worker on host {host_name} was stopped; {saved}; "
                                          f"requeued, {resume} (not counted as a restart)", retry_kind="interrupted")
    if stop.kind == "share" and stop.overrun is not None:
        return share_watch.decision(stop.overrun, saved, resume)
    if stop.kind == "preempt":
        return outcome.Decision("preempted", f"preempted by training {stop.preempted_by}: {saved}; its GPUs go "
                                             f"to that training, then it is requeued and {resume} (not counted "
                                             "as a restart)")
    if stop.kind == "reclaim":
        return outcome.Decision("reclaimed", f"reclaimed: its GPUs stayed idle; {saved}; `gpufleet trainings "
                                             f"resume` continues it ({resume.removeprefix('it ')})")
    return outcome.Decision("failed", f"ran past its max_runtime of {max_runtime_s}s; {saved}; `gpufleet "
                                      f"trainings resume` continues it ({resume.removeprefix('it ')})")


def cancelled(d: outcome.Decision, *, step: int | None, path: str | None, checkpointed: bool) -> outcome.Decision:
    """A cancel's end, with what its short grace left: ``gpufleet trainings resume`` continues from that."""
    saved = _saved(step, path, checkpointed)
    if path:
        after = f"`gpufleet trainings resume` continues from {Path(path).name}"
    elif step is not None:
        after = f"`gpufleet trainings resume` continues from step {step}"
    else:
        after = "`gpufleet trainings resume` continues from its newest checkpoint, if it has one"
    return outcome.Decision(d.status, f"{d.reason}; {saved}; {after}", d.retry_kind, d.counts_restart, d.config,
                            d.backoff_s)
