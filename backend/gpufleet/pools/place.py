"""A place to run: one interface, one implementation per kind of pool, found by the pool's ``kind``.

A pool is a place an existing scheduler owns. What gpufleet does with one is
the same whatever scheduler it is (validate a request against its declared
GPUs, write each attempt's folder and spec, carry the job's state, output and
progress back into the training, stop it, count its GPU time); what differs is
how that scheduler is asked, which is one :class:`PlaceKind` subclass each:

- its own settings (:meth:`PlaceKind.options`, checked when an admin adds the pool),
- its nodes and whether it is reachable (:meth:`~PlaceKind.nodes`),
- submitting an attempt as the member (:meth:`~PlaceKind.submit`),
- the states of its jobs in gpufleet's words (:meth:`~PlaceKind.poll`, :data:`JOB_STATES`),
- stopping a job with a signal, or at once (:meth:`~PlaceKind.signal`),
- its accounting of finished jobs (:meth:`~PlaceKind.accounting`),
- how a node learns its rank layout (:attr:`~PlaceKind.node_side`, one of
  :data:`gpufleet.pools.node.SIDES`).

:func:`gpufleet.pools.kinds.register` adds a kind; :func:`~gpufleet.pools.kinds.place_kind`
finds a pool's. The Slurm kind (:mod:`gpufleet.pools.slurm_place`) is always there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from gpufleet.db.pools import Pool, PoolJob
    from gpufleet.pools.attempt import Attempt

# A job's state in gpufleet's words; each kind maps its scheduler's own onto these.
JOB_STATES = ("pending", "running", "completed", "failed", "cancelled", "timeout", "requeued")
LIVE_STATES = ("pending", "running")


class PlaceError(RuntimeError):
    """The place's scheduler could not be asked, or refused; the message is its own words."""


@dataclass(frozen=True)
class JobReport:
    """One job as its scheduler reports it, in gpufleet's words."""

    job_id: str
    state: str  # one of JOB_STATES
    reason: str = ""  # why it waits, in words a member reads ("" when it does not)
    nodes: str = ""  # where it runs or ran ("" when nowhere yet)
    exit_code: int | None = None
    native: str = ""  # the scheduler's own word for the state, for the training's events
    start: datetime | None = None  # when it started running (None while pending)
    reason_code: str = ""  # the scheduler's own code for the reason, kept in the job's row


@dataclass(frozen=True)
class NodeReport:
    """One node of a place as its scheduler reports it."""

    name: str
    state: str
    gres: str = ""
    gres_used: str = ""
    cpus: str = ""


@dataclass(frozen=True)
class Accounted:
    """A finished job as the place's accounting keeps it: what the usage report counts."""

    start: datetime | None
    end: datetime | None
    gpus: int | None  # None: the record does not say
    source: str  # which record it came from ("sacct", "jobcomp", ...)


class PlaceKind:
    """One kind of place (a Slurm partition, ...). Subclasses answer for their scheduler."""

    name: ClassVar[str]
    label: ClassVar[str]  # how a member reads it: "Slurm" in "Slurm pool cluster", "Slurm job 42"
    node_side: ClassVar[str] = "env"  # how a node learns its task and rendezvous (gpufleet.pools.node.SIDES)
    works: ClassVar[tuple[str, ...]] = ("recipe", "script")  # the kinds of work it runs

    def options(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """The kind's own settings from an admin's request, checked (a :class:`ValueError` says what to fix)."""
        if given:
            raise ValueError(f"a {self.label} pool takes no options; it was given {', '.join(sorted(given))}")
        return {}

    def check(self, options: Mapping[str, Any]) -> None:
        """Whether a pool with these settings can be used now (its scheduler answers, its queue exists)."""

    def queue(self, pool: Pool) -> str:
        """The queue of its scheduler the pool's jobs go to, in words (``partition gpu``; "" when it has one)."""
        return ""

    def where(self, pool: Pool) -> str:
        """The pool as its first event names it: ``Slurm pool cluster (partition gpu)``."""
        queue = self.queue(pool)
        return f"{self.label} pool {pool.name}" + (f" ({queue})" if queue else "")

    def nodes(self, pool: Pool) -> list[NodeReport]:
        """The place's nodes now; :class:`PlaceError` when its scheduler does not answer."""
        raise NotImplementedError

    def output_name(self, attempt: int) -> str:
        """The file (in the training's folder) the attempt's job writes its output to."""
        return f"job-{attempt}.out"

    def submit(self, a: Attempt, kind: str, spec: Path, output: Path) -> str:
        """Send attempt ``a`` (its spec written at ``spec``) as its member; the job's id. ``kind``: the work's."""
        raise NotImplementedError

    def poll(self, jobs: list[PoolJob]) -> dict[str, JobReport]:
        """The jobs' states; a job the scheduler no longer knows is missing."""
        raise NotImplementedError

    def signal(self, job: PoolJob, signal: str | None) -> None:
        """Send ``signal`` (``TERM``) to the job's ranks, or with None end the job now."""
        raise NotImplementedError

    def accounting(self, job_ids: list[str]) -> dict[str, Accounted]:
        """The place's own records of these finished jobs; a job with no record is missing."""
        return {}
