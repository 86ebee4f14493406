"""The Slurm kind of place: a partition, its jobs submitted with ``sbatch`` as the member.

Its settings are the partition and the account its jobs are charged to; a job
is one ``srun`` over :mod:`gpufleet.pools.node` (one task per node, reading
its rank layout from ``SLURM_*``); Slurm's job states and reasons become
gpufleet's words here, and nowhere else. The commands themselves are
:mod:`gpufleet.pools.slurm`.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufleet.pools import slurm
from gpufleet.pools.place import Accounted, JobReport, NodeReport, PlaceError, PlaceKind

if TYPE_CHECKING:
    from gpufleet.db.pools import Pool, PoolJob
    from gpufleet.pools.attempt import Attempt

JOB_NAME = "gpufleet-{tid}"
RUNNING = ("RUNNING", "COMPLETING", "CONFIGURING", "STAGE_OUT", "SIGNALING")
FAILED = ("FAILED", "NODE_FAIL", "BOOT_FAIL", "OUT_OF_MEMORY", "DEADLINE")
REQUEUED = ("PREEMPTED", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD")
_WORD = re.compile(r"^[A-Za-z0-9_.-]{1,255}$")


def state_word(state: str) -> str:
    """Slurm's job state in gpufleet's words (:data:`gpufleet.pools.place.JOB_STATES`)."""
    if state == "PENDING":
        return "pending"
    if state in RUNNING:
        return "running"
    if state in REQUEUED:
        return "requeued"
    return {"COMPLETED": "completed", "CANCELLED": "cancelled", "TIMEOUT": "timeout"}.get(state, "failed")


def _report(s: slurm.JobState) -> JobReport:
    return JobReport(s.job_id, state_word(s.state), slurm.reason_words(s.reason) if s.state == "PENDING" else "",
                     s.nodes if s.nodes != "(null)" else "", s.exit_code, s.state, s.start, s.reason)


def _asked(call: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return call(*args, **kwargs)
    except slurm.SlurmError as exc:
        raise PlaceError(str(exc)) from None


class SlurmPlace(PlaceKind):
    name = "slurm"
    label = "Slurm"
    node_side = "slurm"

    def options(self, given: Mapping[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(given) - {"partition", "account"})
        if unknown:
            raise ValueError(f"a Slurm pool takes a partition and an account, not {', '.join(unknown)}")
        out = {k: given.get(k) for k in ("partition", "account")}
        for key, value in out.items():
            if value is not None and not (isinstance(value, str) and _WORD.match(value)):
                raise ValueError(f"{key} {value!r}: use letters, digits, '_', '.' or '-'")
        if not out["partition"]:
            raise ValueError("a Slurm pool needs its partition (--partition)")
        return out

    def check(self, options: Mapping[str, Any]) -> None:
        try:
            known = slurm.partition_exists(options["partition"])
        except slurm.SlurmError as exc:
            raise PlaceError(f"cannot reach the Slurm cluster from this host: {exc}") from None
        if not known:
            raise ValueError(f"Slurm has no partition {options['partition']!r} (sinfo lists the partitions)")

    def queue(self, pool: Pool) -> str:
        return f"partition {pool.options['partition']}"

    def nodes(self, pool: Pool) -> list[NodeReport]:
        return [NodeReport(n.name, n.state, n.gres, n.gres_used, n.cpus)
                for n in _asked(slurm.nodes, pool.options["partition"])]

    def output_name(self, attempt: int) -> str:
        return f"slurm-{attempt}.out"

    def submit(self, a: Attempt, kind: str, spec: Path, output: Path) -> str:
        from gpufleet import memberfs

        batch = a.home / f"job-{a.number}.sh"
        with memberfs.Dir.root(a.pool.checkpoint_root) as root:
            root.write_new(a.rel(batch), _batch_script(a.pool, kind, spec), 0o755)
            root.give(a.rel(batch), a.account.uid, a.account.gid, 0o755)
        return _asked(slurm.submit, str(batch), a.account.name, sbatch_args(a, output), str(a.home))

    def poll(self, jobs: list[PoolJob]) -> dict[str, JobReport]:
        states = _asked(slurm.jobs, [job.job_id for job in jobs])
        out = {}
        for job in jobs:
            # Once slurmctld has forgotten a job (MinJobAge), Slurm's accounting still has it.
            state = states.get(job.job_id) or slurm.accounted(job.job_id)
            if state is not None:
                out[job.job_id] = _report(state)
        return out

    def signal(self, job: PoolJob, signal: str | None) -> None:
        # A signal goes to the job steps (the ranks) only: the batch shell runs srun, which would abort the step.
        _asked(slurm.cancel, job.job_id, signal=signal, account=job.account)

    def accounting(self, job_ids: list[str]) -> dict[str, Accounted]:
        return {j: Accounted(r.start, r.end, r.gpus, r.source) for j, r in slurm.usage_records(job_ids).items()}


def sbatch_args(a: Attempt, output: Path) -> list[str]:
    """What the job asks Slurm for: its nodes and GPUs on each, its time limit and the stop signal."""
    from gpufleet.pools.attempt import layout

    t, pool = a.training, a.pool
    grace = max(1, int(a.settings.stop_grace_s))
    node_count, per_node = layout(pool, t.world_size)
    # One task per node: gpufleet's launcher there starts one rank per GPU it was granted.
    args = [f"--job-name={JOB_NAME.format(tid=t.id)}", f"--partition={pool.options['partition']}",
            f"--nodes={node_count}", "--ntasks-per-node=1", f"--gres=gpu:{per_node}", f"--output={output}",
            "--export=NONE",
            # Slurm's stop contract as gpufleet's: SIGTERM (checkpoint and stop) before the time limit's kill.
            f"--signal=TERM@{grace}"]
    if pool.options.get("account"):
        args.append(f"--account={pool.options['account']}")
    if t.max_runtime_s:
        args.append(f"--time={math.ceil(t.max_runtime_s / 60)}")
    return args


def _batch_script(pool: Pool, kind: str, spec: Path) -> str:
    node = f"{shlex.quote(pool.python)} -m gpufleet.pools.node --side slurm {kind} {shlex.quote(str(spec))}"
    return ("#!/bin/sh\n"
            "# One task per node; gpufleet's launcher starts one rank per GPU Slurm granted.\n"
            "export SLURM_EXPORT_ENV=ALL PYTHONUNBUFFERED=1\n"
            f"exec srun --kill-on-bad-exit=1 {node}\n")

