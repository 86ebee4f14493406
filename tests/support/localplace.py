"""A kind of place for the tests: a "cluster" of this one machine, whose scheduler is a dict of subprocesses.

It implements the same :class:`gpufleet.pools.place.PlaceKind` the Slurm kind
does, and nothing of gpufleet's knows it: a test registers it
(:func:`gpufleet.pools.kinds.register`), adds a pool of its kind, and a
training sent there goes through the pools' loop, the attempt's folder and
spec, :mod:`gpufleet.pools.node` (its ``env`` side: ``GPUFLEET_NODE_*``) and
gpufleet's launcher as a Slurm job does. Each job runs as the member's own
Unix account, in a session of its own; it waits ``pending`` until the next
poll starts it, as a real queue would make it wait.
"""

from __future__ import annotations

import itertools
import os
import signal as signals
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from gpufleet.db.types import utcnow
from gpufleet.pools.place import Accounted, JobReport, NodeReport, PlaceKind

NODE = "here"


@dataclass
class LocalJob:
    argv: list[str]
    uid: int
    gid: int
    cwd: str
    env: dict[str, str]
    gpus: int
    proc: subprocess.Popen | None = None
    start: datetime | None = None
    end: datetime | None = None
    signals: list[str] = field(default_factory=list)


class LocalPlace(PlaceKind):
    name = "local-test"
    label = "local"
    node_side = "env"

    def __init__(self) -> None:
        self.jobs: dict[str, LocalJob] = {}
        self._ids = itertools.count(1000)

    def options(self, given: Mapping[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(given) - {"slots"})
        if unknown:
            raise ValueError(f"a local pool takes slots, not {', '.join(unknown)}")
        slots = given.get("slots", 1)
        if not isinstance(slots, int) or not 1 <= slots <= 8:
            raise ValueError(f"slots {slots!r}: give 1 to 8")
        return {"slots": slots}

    def nodes(self, pool: Any) -> list[NodeReport]:
        busy = sum(j.proc is not None and j.proc.poll() is None for j in self.jobs.values())
        return [NodeReport(NODE, "mixed" if busy else "idle", f"gpu:{pool.gpus_per_node or 1}")]

    def submit(self, a: Any, kind: str, spec: Path, output: Path) -> str:
        job = str(next(self._ids))
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1", "HOME": "/nonexistent",
               "GPUFLEET_NODE_JOB": job, "GPUFLEET_NODE_TASK": "0", "GPUFLEET_NODE_TASKS": "1",
               "GPUFLEET_NODE_NAME": NODE}
        # The member's own shell opens the output in her folder, as a scheduler's job step does.
        argv = ["/bin/sh", "-c", 'exec "$@" >"$0" 2>&1', str(output), a.pool.python, "-m", "gpufleet.pools.node",
                "--side", self.node_side, kind, str(spec)]
        self.jobs[job] = LocalJob(argv, a.account.uid, a.account.gid, str(a.home), env, a.training.world_size)
        return job

    def _start(self, job: LocalJob) -> None:
        job.proc = subprocess.Popen(job.argv, cwd=job.cwd, env=job.env, user=job.uid, group=job.gid,
                                    extra_groups=[], start_new_session=True)
        job.start = utcnow()

    def poll(self, jobs: list[Any]) -> dict[str, JobReport]:
        out = {}
        for row in jobs:
            job = self.jobs.get(row.job_id)
            if job is None:
                continue  # not ours: a job this scheduler does not know
            if job.proc is None and not job.signals:
                if row.state == "pending" and row.reason == "Slot":
                    self._start(job)  # its wait was seen: the slot is free now
                else:
                    out[row.job_id] = JobReport(row.job_id, "pending", "waiting for a free slot", native="queued",
                                                reason_code="Slot")
                    continue
            code = None if job.proc is None else job.proc.poll()
            if job.proc is not None and code is None:
                out[row.job_id] = JobReport(row.job_id, "running", nodes=NODE, native="started", start=job.start)
                continue
            job.end = job.end or utcnow()
            state = "completed" if code == 0 else "cancelled" if job.signals else "failed"
            exit_code = None if code is None else (code if code >= 0 else 128 - code)
            out[row.job_id] = JobReport(row.job_id, state, nodes=NODE if job.start else "", exit_code=exit_code,
                                        native=f"exited {code}", start=job.start)
        return out

    def signal(self, job_row: Any, signal: str | None) -> None:
        job = self.jobs[job_row.job_id]
        job.signals.append(signal or "KILL")
        if job.proc is not None and job.proc.poll() is None:
            os.killpg(job.proc.pid, signals.SIGTERM if signal == "TERM" else signals.SIGKILL)

    def accounting(self, job_ids: list[str]) -> dict[str, Accounted]:
        return {j: Accounted(self.jobs[j].start, self.jobs[j].end, self.jobs[j].gpus, "local")
                for j in job_ids if j in self.jobs and self.jobs[j].end is not None}

    def close(self) -> None:
        for job in self.jobs.values():
            if job.proc is not None and job.proc.poll() is None:
                os.killpg(job.proc.pid, signals.SIGKILL)
                job.proc.wait(30)
