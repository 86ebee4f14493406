"""Helpers of the checkpoint store's tests: a store on the test server, and checkpoints to put in it."""

from __future__ import annotations

import json
import os
from pathlib import Path

from support.s3server import S3Server

from gpufleet.ckptstore import Store, open_store
from gpufleet.config import CheckpointStoreSettings


def settings_for(s3: S3Server, bucket: str, folder: Path, **extra: object) -> CheckpointStoreSettings:
    return CheckpointStoreSettings(checkpoint_store=f"s3://{bucket}/team", checkpoint_store_endpoint=s3.endpoint,
                                   checkpoint_store_credentials_file=s3.credentials_file(folder), **extra)


def store_for(s3: S3Server, bucket: str, folder: Path) -> Store:
    store = open_store(settings_for(s3, bucket, folder))
    assert store is not None
    return store


def recipe_checkpoint(ckpt_dir: Path, step: int, size: int = 1000) -> str:
    """A checkpoint in gpufleet's own layout (``step-N/`` with ``meta.json``), with a nested file."""
    name = f"step-{step}"
    (ckpt_dir / name / "optim").mkdir(parents=True)
    (ckpt_dir / name / "model.bin").write_bytes(os.urandom(size))
    (ckpt_dir / name / "optim" / "state.bin").write_bytes(os.urandom(100))
    (ckpt_dir / name / "meta.json").write_text(json.dumps({"step": step}))
    return name


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
