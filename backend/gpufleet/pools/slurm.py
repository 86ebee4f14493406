"""The Slurm client commands, run on this host: what a pool reads and sends.

``sinfo``/``squeue``/``scontrol`` read the cluster (any account may);
``sbatch`` runs as the member's own Unix account (``runuser -u ACCOUNT``), so
Slurm runs the job as that account, as it does for everyone who submits;
``scancel`` runs as this host's account (an operator's: root or SlurmUser)
or, where it may not, as the member. ``SLURM_CONF`` comes from the
environment, as for any Slurm client.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass

TIMEOUT_S = 20.0
# Slurm's pending reasons in words (squeue's %r), for the wait reason a member reads.
REASONS = {
    "Resources": "waiting for free GPUs on the partition's nodes (Slurm: Resources)",
    "Priority": "jobs of higher priority are ahead of it (Slurm: Priority)",
    "QOSMaxGRESPerUser": "the owner has as many GPUs as their Slurm QOS allows (Slurm: QOSMaxGRESPerUser)",
    "QOSMaxJobsPerUserLimit": "the owner runs as many jobs as their Slurm QOS allows (Slurm: QOSMaxJobsPerUserLimit)",
    "AssocGrpGRES": "the Slurm account's GPU limit is reached (Slurm: AssocGrpGRES)",
    "ReqNodeNotAvail": "a node it needs is down, drained or reserved (Slurm: ReqNodeNotAvail)",
    "PartitionDown": "the partition is down (Slurm: PartitionDown)",
    "PartitionNodeLimit": "it asks for more nodes than the partition allows (Slurm: PartitionNodeLimit)",
    "PartitionTimeLimit": "its time limit is past the partition's (Slurm: PartitionTimeLimit)",
    "BeginTime": "it may not start yet (Slurm: BeginTime)",
    "Dependency": "it waits for another job (Slurm: Dependency)",
    "JobHeldUser": "held by its owner (Slurm: JobHeldUser)",
    "JobHeldAdmin": "held by a Slurm administrator (Slurm: JobHeldAdmin)",
    "None": "waiting for Slurm's scheduler to consider it",
}


class SlurmError(RuntimeError):
    """A Slurm command failed; the message is the command's own words."""


@dataclass(frozen=True)
class JobState:
    job_id: str
    state: str  # PENDING | RUNNING | COMPLETING | COMPLETED | FAILED | CANCELLED | TIMEOUT | ...
    reason: str
    nodes: str
    exit_code: int | None
    signal: int | None


@dataclass(frozen=True)
class NodeState:
    name: str
    state: str
    partitions: str
    gres: str
    gres_used: str
    cpus: str


def _run(argv: list[str], *, as_account: str | None = None, timeout: float = TIMEOUT_S) -> str:
    if as_account is not None and os.geteuid() == 0:
        argv = ["runuser", "-u", as_account, "--", *argv]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise SlurmError(f"{argv[0]} is not installed on this host (install the Slurm client: slurm-client)") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{' '.join(argv[:3])} did not answer in {timeout:.0f}s; is slurmctld reachable?") from None
    if done.returncode != 0:
        raise SlurmError((done.stderr or done.stdout).strip() or f"{argv[0]} exited with {done.returncode}")
    return done.stdout


def submit(script: str, account: str, args: list[str], workdir: str) -> str:
    """``sbatch`` ``script`` as ``account``; the job's id."""
    out = _run(["sbatch", "--parsable", f"--chdir={workdir}", *args, script], as_account=account)
    return out.strip().split(";")[0]


def cancel(job_id: str, *, signal: str | None = None, account: str | None = None) -> None:
    # A signal goes to the job steps (the ranks) only: the batch shell runs srun, which would abort the step.
    argv = ["scancel", *([f"--signal={signal}"] if signal else []), job_id]
    try:
        _run(argv)
    except SlurmError:
        if account is None:
            raise
        _run(argv, as_account=account)


def _split(line: str, n: int) -> list[str] | None:
    parts = line.split("|")
    return parts if len(parts) == n else None


def _exit(text: str) -> tuple[int | None, int | None]:
    """``squeue``'s exit code is the raw wait status (``3328`` is exit 13); ``sacct``'s is ``13:0``."""
    code, colon, sig = text.partition(":")
    try:
        value = int(code)
        if colon:
            return value, int(sig or 0)
        return value >> 8, value & 0x7F
    except ValueError:
        return None, None


def jobs(job_ids: list[str]) -> dict[str, JobState]:
    """What slurmctld knows of these jobs (finished ones too, while it keeps them: MinJobAge)."""
    if not job_ids:
        return {}
    out = _run(["squeue", "-h", "-t", "all", "-j", ",".join(job_ids), "-O",
                "JobID:|,State:|,Reason:|,NodeList:|,exit_code:"])
    found = {}
    for line in out.splitlines():
        parts = _split(line.rstrip(), 5)
        if parts is None:
            continue
        code, sig = _exit(parts[4].strip())
        found[parts[0].strip()] = JobState(parts[0].strip(), parts[1].strip(), parts[2].strip(),
                                           parts[3].strip(), code, sig)
    return found


def accounted(job_id: str) -> JobState | None:
    """The job from Slurm's accounting (``sacct``), once slurmctld has forgotten it; None without accounting."""
    try:
        out = _run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "JobID,State,Reason,NodeList,ExitCode"])
    except SlurmError:
        return None
    for line in out.splitlines():
        parts = _split(line, 5)
        if parts and parts[0] == job_id:
            code, sig = _exit(parts[4])
            return JobState(job_id, parts[1].split()[0], parts[2], parts[3], code, sig)
    return None


def nodes(partition: str) -> list[NodeState]:
    out = _run(["sinfo", "-h", "-N", "-p", partition, "-O", "NodeList:|,StateLong:|,Partition:|,Gres:|,GresUsed:|,CPUsState:"])
    found = []
    for line in out.splitlines():
        parts = _split(line.rstrip(), 6)
        if parts:
            found.append(NodeState(*(p.strip() for p in parts)))
    return found


def partition_exists(partition: str) -> bool:
    out = _run(["sinfo", "-h", "-o", "%R"])
    return partition in {p.strip() for p in out.split()}


def reason_words(reason: str) -> str:
    return REASONS.get(reason, f"Slurm: {reason}")
