"""Pools on the wire: adding a Slurm pool, and a pool with its nodes as Slurm reports them."""

from __future__ import annotations

import uuid
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from gpufleet.bounds import RequestBody

PoolName = Field(min_length=1, max_length=63, pattern="^[a-z0-9][a-z0-9_-]*$")


class PoolCreate(RequestBody):
    kind: str = Field(default="slurm", pattern="^slurm$", description="the pool's scheduler: slurm")
    name: str = PoolName
    partition: str = Field(min_length=1, max_length=255, pattern=r"^[A-Za-z0-9_.-]+$")
    account: str | None = Field(default=None, min_length=1, max_length=255, pattern=r"^[A-Za-z0-9_.-]+$",
                                description="the Slurm account (--account) its jobs are charged to")
    gpus_per_node: int | None = Field(default=None, ge=1, le=64)
    gpu_model: str | None = Field(default=None, min_length=1, max_length=255)
    gpu_memory_mb: int | None = Field(default=None, ge=1, le=2**30, description="memory of one of its GPUs")
    checkpoint_root: str | None = Field(
        default=None, min_length=1, max_length=4096, pattern="^/",
        description="a folder on the cluster's shared file system that this host sees at the same path: "
                    "each training's checkpoints, progress and job output")
    python: str | None = Field(default=None, min_length=1, max_length=4096, pattern="^/",
                               description="the Python with gpufleet installed on the nodes (default: this server's)")


class PoolNode(BaseModel):
    name: str
    state: str
    gres: str
    gres_used: str
    cpus: str = Field(description="allocated/idle/other/total, as sinfo's CPUsState")


class PoolPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: uuid.UUID
    name: str
    kind: str
    partition: str
    account: str | None = None
    gpus_per_node: int | None = None
    gpu_model: str | None = None
    gpu_memory: int | None = None
    checkpoint_root: str
    python: str
    created_at: datetime
    nodes: list[PoolNode] | None = Field(default=None, description="the partition's nodes now; null when Slurm "
                                                                    "did not answer")
    error: str | None = Field(default=None, description="why the nodes could not be read")


class PoolsPublic(BaseModel):
    data: list[PoolPublic]
    count: int
