"""What the sessions API takes and answers; the Python client and the CLI use the same models."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SessionStatus = Literal["queued", "starting", "running", "stopping", "stopped", "failed"]
EndReason = Literal["user", "idle", "time_limit", "failed"]


class SessionCreate(BaseModel):
    """A request for GPUs to work on interactively."""

    model_config = ConfigDict(extra="forbid")

    gpus: int = Field(default=1, ge=1, le=64, description="GPUs to reserve, on one host")
    memory_mb: int | None = Field(default=None, ge=1, le=2**31,
                                  description="memory needed per GPU (MiB); places the session by it")
    hours: float | None = Field(default=None, gt=0, le=24 * 365,
                                description="time limit; default GPUFLEET_SESSION_DEFAULT_HOURS")
    jupyter: bool = Field(default=False, description="start a Jupyter server, opened on the notebooks' own origin"
                          " (the dashboard's Open, or POST /api/v1/sessions/{id}/open)")
    host: str | None = Field(default=None, min_length=1, max_length=255, description="run on this host")
    name: str | None = Field(default=None, min_length=1, max_length=200)
    priority: int = Field(default=0, ge=-1000, le=1000)
    preemptible: bool = Field(default=False, description="may be stopped for higher-priority work")


class SessionExtend(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hours: float = Field(gt=0, le=24 * 365, description="hours to add to the time limit")


class SessionPublic(BaseModel):
    id: str
    name: str
    owner: str
    mode: Literal["shell", "jupyter"]
    status: SessionStatus
    status_reason: str | None = None
    wait_reason: str | None = None
    end_reason: EndReason | None = None
    training_status: str
    gpus: int
    gpu_ids: list[int] | None = None
    host: str | None = None
    memory_mb: int | None = None
    priority: int
    preemptible: bool
    hours: float
    created_at: datetime
    started_at: datetime | None = None
    ready_at: datetime | None = None
    ends_at: datetime | None = None
    finished_at: datetime | None = None
    idle_since: datetime | None = None
    idle_warned_at: datetime | None = None
    idle_stop_at: datetime | None = None
    url: str | None = None
    shell: str | None = None


class NotebookOpen(BaseModel):
    """Where a browser opens a session's notebook: its own origin, with a single-use ticket."""

    url: str = Field(description="the notebook on its own origin, with a ticket that lets this browser in once")
    expires_in_s: int = Field(description="the ticket works once, within this many seconds")


class SessionList(BaseModel):
    items: list[SessionPublic]
    total: int


class SessionLimitSet(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_hours: float = Field(gt=0, le=24 * 365)


class SessionLimitPublic(BaseModel):
    kind: Literal["user", "group"]
    name: str
    max_hours: float
    set_by: str | None = None


class ShellTarget(BaseModel):
    """Where and how to open a shell in a session (``gpufleet session shell``)."""

    id: str
    host: str
    host_address: str | None = None
    account: str | None = None
    env: dict[str, str]
    ssh: str
