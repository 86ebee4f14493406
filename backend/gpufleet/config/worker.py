"""Section ``worker``: how a host's worker runs trainings — their files, leases, grace, logs and warm launchers."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field


class WorkerSettings(BaseModel):
    # Where trainings read data and write checkpoints (default: under the data directory).
    data_root: Path | None = None
    checkpoint_root: Path | None = None
    collective_timeout_s: float = Field(default=60.0, gt=0, le=3600)
    lease_s: float = Field(default=30.0, ge=2, le=3600)
    # How long a worker keeps its ranks running while it cannot reach the database (its lease is judged only
    # over time the database could be reached: gpufleet.jobs.reach); past it, it stops them.
    db_outage_grace_s: float = Field(default=180.0, ge=0, le=3600)
    # How long a stopping worker, or a preemption, gives the ranks to checkpoint before it kills them.
    stop_grace_s: float = Field(default=60.0, gt=0, le=3600)
    # How long the processes of work on a share may hold more of the GPU than its budget (NVML's per-process
    # memory, read every share_sample_s) before the worker stops them alone (gpufleet.jobs.share_watch).
    share_over_s: float = Field(default=2.0, gt=0, le=600)
    share_sample_s: float = Field(default=0.5, ge=0.05, le=60)
    # How long the ranks of a training across hosts wait for each other.
    rendezvous_timeout_s: float = Field(default=120.0, gt=0, le=3600)
    log_max_bytes: int = Field(default=20 * 1024 * 1024, ge=4096)
    # Each host ships its trainings' logs to the database: how often, in rows of at most this many bytes.
    log_ship_interval_s: float = Field(default=1.0, gt=0, le=60)
    log_chunk_bytes: int = Field(default=64 * 1024, ge=1024, le=16 * 1024 * 1024)
    # Interpreters each worker keeps ready with torch and gpufleet imported, that recipe trainings
    # running as the worker's own account start from (gpufleet.jobs.warmpool); 0 turns the pool off.
    warm_pool_size: int = Field(default=2, ge=0, le=32)
    # Warm launchers per member whose recipe trainings run as their own Unix account without a sandbox,
    # kept while that member started a training on this worker in the last member_warm_keep_s; 0: off.
    member_warm_pool_size: int = Field(default=1, ge=0, le=8)
    member_warm_keep_s: float = Field(default=600.0, gt=0, le=86400)
    # In a fleet, members' code shares each host's network with Redis and PostgreSQL: a worker refuses to
    # run it while either is reached without a password (gpufleet.jobs.isolation), unless this is on.
    allow_services_without_password: bool = False
    # `serve` runs the embedded worker and agent unless told not to.
    embedded_worker: bool = True
