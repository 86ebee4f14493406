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
import re
import subprocess
import threading
from dataclasses import dataclass
from datetime import datetime, timezone

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
    start: datetime | None = None  # when it started running (None while pending)


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
                "JobID:|,State:|,Reason:|,NodeList:|,exit_code:|,StartTime:"])
    found = {}
    for line in out.splitlines():
        parts = _split(line.rstrip(), 6)
        if parts is None:
            continue
        code, sig = _exit(parts[4].strip())
        found[parts[0].strip()] = JobState(parts[0].strip(), parts[1].strip(), parts[2].strip(),
                                           parts[3].strip(), code, sig, slurm_time(parts[5]))
    return found


def slurm_time(text: str) -> datetime | None:
    """Slurm's ``2026-11-29T06:40:18`` (the cluster's local time, as this host's clock reads it) in UTC;
    None for ``Unknown``, ``None`` and the like."""
    try:
        return datetime.fromisoformat(text.strip()).astimezone(timezone.utc)
    except ValueError:
        return None


@dataclass(frozen=True)
class Accounted:
    """A finished job as Slurm's accounting keeps it: what the usage report counts."""

    start: datetime | None
    end: datetime | None
    gpus: int | None  # None: the record does not say (jobcomp without gres/gpu as a TRES)
    nodes: int | None
    source: str  # "sacct" or "jobcomp"


_GPU_TRES = re.compile(r"(?:^|,)gres/gpu=(\d+)")


def _gpus_of(tres: str) -> int | None:
    m = _GPU_TRES.search(tres)
    return int(m.group(1)) if m else None


def usage_records(job_ids: list[str]) -> dict[str, Accounted]:
    """These jobs' records in Slurm's accounting, one question for all: ``sacct`` where the cluster keeps
    accounting (slurmdbd), else its job-completion log where that is a file this host reads
    (``JobCompType=jobcomp/filetxt``). A job Slurm keeps no record of (or has not written yet) is missing."""
    if not job_ids:
        return {}
    try:
        out = _run(["sacct", "-n", "-P", "-X", "-j", ",".join(job_ids), "-o", "JobID,Start,End,AllocTRES,NNodes"])
    except SlurmError:
        out = ""
    found = {}
    for line in out.splitlines():
        parts = _split(line, 5)
        if parts and parts[0] in job_ids:
            found[parts[0]] = Accounted(slurm_time(parts[1]), slurm_time(parts[2]), _gpus_of(parts[3]),
                                        int(parts[4]) if parts[4].isdigit() else None, "sacct")
    missing = [j for j in job_ids if j not in found]
    path = _jobcomp_file() if missing else None
    if path:
        found.update({j: rec for j in missing if (rec := _JOBCOMP.record(path, j)) is not None})
    return found


def _jobcomp_file() -> str | None:
    try:
        conf = _run(["scontrol", "show", "config"])
    except SlurmError:
        return None
    values = dict(re.findall(r"^(\w+)\s*=\s*(.*?)\s*$", conf, re.MULTILINE))
    if values.get("JobCompType") != "jobcomp/filetxt":
        return None
    loc = values.get("JobCompLoc", "")
    return loc if loc.startswith("/") and os.access(loc, os.R_OK) else None


class _JobCompLog:
    """Slurm's job-completion file, read forward from where the last read stopped (it only grows), keeping
    the records of gpufleet's jobs (named ``gpufleet-...``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._files: dict[str, tuple[int, int, dict[str, Accounted]]] = {}  # path: (inode, offset, records)

    def record(self, path: str, job_id: str) -> Accounted | None:
        with self._lock:
            try:
                st = os.stat(path)
                inode, offset, records = self._files.get(path, (st.st_ino, 0, {}))
                if inode != st.st_ino or st.st_size < offset:  # rotated: start over
                    inode, offset, records = st.st_ino, 0, {}
                with open(path, "rb") as fh:
                    fh.seek(offset)
                    data = fh.read()
            except OSError:
                return None
            done = data.rfind(b"\n") + 1  # a line still being written waits for the next read
            for line in data[:done].decode("utf-8", "replace").splitlines():
                fields = dict(re.findall(r"(\w+)=(\S*)", line))
                if fields.get("Name", "").startswith("gpufleet-") and fields.get("JobId"):
                    nodes = fields.get("NodeCnt", "")
                    records[fields["JobId"]] = Accounted(
                        slurm_time(fields.get("StartTime", "")), slurm_time(fields.get("EndTime", "")),
                        _gpus_of(fields.get("Tres", "")), int(nodes) if nodes.isdigit() else None, "jobcomp")
            self._files[path] = (inode, offset + done, records)
            return records.get(job_id)


_JOBCOMP = _JobCompLog()


def accounted(job_id: str) -> JobState | None:
    """The job from Slurm's accounting (``sacct``), once slurmctld has forgotten it; None without accounting."""
    try:
        out = _run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "JobID,State,Reason,NodeList,ExitCode,Start"])
    except SlurmError:
        return None
    for line in out.splitlines():
        parts = _split(line, 6)
        if parts and parts[0] == job_id:
            code, sig = _exit(parts[4])
            return JobState(job_id, parts[1].split()[0], parts[2], parts[3], code, sig, slurm_time(parts[5]))
    return None


def nodes(partition: str) -> list[NodeState]:
    out = _run(["sinfo", "-h", "-N", "-p", partition,
                "-O", "NodeList:|,StateLong:|,Partition:|,Gres:|,GresUsed:|,CPUsState:"])
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
