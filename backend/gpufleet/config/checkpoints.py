"""Section ``checkpoints``: where every training's checkpoints travel to (an S3-compatible store), and what
of them is kept there."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, field_validator

# S3's own rule for a bucket's name (3-63 lower-case letters, digits, dots, hyphens).
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


class CheckpointStoreSettings(BaseModel):
    # s3://bucket/prefix: every training's checkpoints are uploaded there and resumed from there, on any
    # host or pool. Unset: checkpoints stay in the checkpoint root only.
    checkpoint_store: str | None = None
    # The store's endpoint (an S3-compatible server's URL; unset: AWS's own for the region) and region.
    checkpoint_store_endpoint: str | None = None
    checkpoint_store_region: str = "us-east-1"
    # A file in the AWS shared-credentials form ([default] aws_access_key_id / aws_secret_access_key),
    # readable by the worker alone: credentials never come from a process's environment.
    checkpoint_store_credentials_file: Path | None = None
    # Retention in the store: the newest K complete checkpoints of each training, and the best one by this
    # reported metric (lower is better with "min"), are kept; the rest are deleted from the store.
    checkpoint_store_keep_last: int = Field(default=3, ge=1, le=10_000)
    checkpoint_store_keep_best_metric: str | None = None
    checkpoint_store_keep_best_mode: Literal["min", "max"] = "min"
    # While the store is down or slow, uploads wait and are retried (this first wait, doubled each time, at
    # most ten minutes); a training keeps at most this many checkpoints waiting (a newer one replaces the
    # oldest waiting, with an event), so a long outage holds no more than that much of its disk.
    checkpoint_store_retry_s: float = Field(default=5.0, gt=0, le=3600)
    checkpoint_store_max_waiting: int = Field(default=2, ge=1, le=100)

    @field_validator("checkpoint_store")
    @classmethod
    def _check_store(cls, v: str | None) -> str | None:
        if not v:
            return None
        if not v.startswith("s3://"):
            raise ValueError("must be s3://bucket or s3://bucket/prefix")
        bucket = v[5:].split("/", 1)[0]
        if not _BUCKET.match(bucket):
            raise ValueError(f"bucket {bucket!r} is not a valid S3 bucket name (3-63 of a-z, 0-9, '.', '-')")
        return v.rstrip("/")

    @field_validator("checkpoint_store_endpoint")
    @classmethod
    def _check_endpoint(cls, v: str | None) -> str | None:
        if not v:
            return None
        if not (v.startswith("https://") or v.startswith("http://")):
            raise ValueError("must be an http:// or https:// URL")
        return v.rstrip("/")

    @property
    def checkpoint_bucket(self) -> str:
        return (self.checkpoint_store or "s3://")[5:].split("/", 1)[0]

    @property
    def checkpoint_prefix(self) -> str:
        parts = (self.checkpoint_store or "s3://")[5:].split("/", 1)
        return parts[1].strip("/") if len(parts) > 1 else ""
