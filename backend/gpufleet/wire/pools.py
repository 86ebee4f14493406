"""Pools on the wire: adding one, and a pool with its nodes as its scheduler reports them.

What every pool has (a name, its declared GPUs, its shared folder, the nodes' Python) is
:class:`PoolCreateBase`; each kind of pool adds its own settings in a model of its own, told
apart by ``kind`` (Slurm: :class:`SlurmPoolCreate`). A second kind makes ``PoolCreate`` the
union ``Annotated[SlurmPoolCreate | OtherPoolCreate, Field(discriminator="kind")]`` (and
``PoolPublic`` likewise); with one kind it is that kind's model, so a request that leaves
``kind`` out still means Slurm.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gpufleet.bounds import RequestBody

PoolName = Field(min_length=1, max_length=63, pattern="^[a-z0-9][a-z0-9_-]*$")
SlurmWord = Field(min_length=1, max_length=255, pattern=r"^[A-Za-z0-9_.-]+$")


class PoolCreateBase(RequestBody):
    name: str = PoolName
    gpus_per_node: int | None = Field(default=None, ge=1, le=64)
    gpu_model: str | None = Field(default=None, min_length=1, max_length=255)
    gpu_memory_mb: int | None = Field(default=None, ge=1, le=2**30, description="memory of one of its GPUs")
    checkpoint_root: str | None = Field(
        default=None, min_length=1, max_length=4096, pattern="^/",
        description="a folder on the cluster's shared file system that this host sees at the same path: "
                    "each training's checkpoints, progress and job output")
    python: str | None = Field(default=None, min_length=1, max_length=4096, pattern="^/",
                               description="the Python with gpufleet installed on the nodes (default: this server's)")

    def options(self) -> dict[str, Any]:
        """The kind's own settings, as the pool's kind checks and keeps them (``pools.options``)."""
        return {}


class SlurmPoolCreate(PoolCreateBase):
    kind: Literal["slurm"] = Field(default="slurm", description="the pool's scheduler: slurm")
    partition: str = SlurmWord
    account: str | None = Field(default=None, min_length=1, max_length=255, pattern=r"^[A-Za-z0-9_.-]+$",
                                description="the Slurm account (--account) its jobs are charged to")

    def options(self) -> dict[str, Any]:
        return {"partition": self.partition, "account": self.account}


PoolCreate = SlurmPoolCreate


class PoolNode(BaseModel):
    name: str
    state: str
    gres: str
    gres_used: str
    cpus: str = Field(description="allocated/idle/other/total, as sinfo's CPUsState")


class PoolPublicBase(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: uuid.UUID
    name: str
    gpus_per_node: int | None = None
    gpu_model: str | None = None
    gpu_memory: int | None = None
    checkpoint_root: str
    python: str
    created_at: datetime
    nodes: list[PoolNode] | None = Field(default=None, description="the partition's nodes now; null when Slurm "
                                                                    "did not answer")
    error: str | None = Field(default=None, description="why the nodes could not be read")


class SlurmPoolPublic(PoolPublicBase):
    kind: Literal["slurm"] = "slurm"
    partition: str
    account: str | None = None

    @classmethod
    def of(cls, pool: Any) -> SlurmPoolPublic:
        """The answer for a pool row: its kind's settings (``options``) beside what every pool has."""
        return cls.model_validate({**{k: getattr(pool, k) for k in PoolPublicBase.model_fields
                                      if hasattr(pool, k)}, **pool.options})


PoolPublic = SlurmPoolPublic


class PoolsPublic(BaseModel):
    data: list[PoolPublic]
    count: int
