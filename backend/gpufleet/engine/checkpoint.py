"""Checkpoints: ``<dir>/step-N/`` folders that count once ``meta.json`` exists.

A folder is written under a temporary name and renamed into place after its
metadata, so a crash mid-write never leaves a folder that looks complete. The
model is saved unwrapped (no ``module.`` / ``_orig_mod.`` prefixes, FSDP
shards gathered), so a checkpoint loads on one device or many, with or
without DDP/FSDP.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_state_dict,
)

from gpufleet.engine import fence

_STEP_DIR = re.compile(r"^step-(\d+)$")
META = "meta.json"

# The attempt this process writes for (set by the launcher); None outside gpufleet's jobs.
_ATTEMPT: int | None = None


def set_attempt(attempt: int | None) -> None:
    """Fence this process's checkpoint writes by ``attempt`` (see ``engine.fence``)."""
    global _ATTEMPT
    _ATTEMPT = attempt


def list_checkpoints(ckpt_dir: str | Path) -> list[tuple[int, Path]]:
    """Valid checkpoints as (step, path), oldest first."""
    d = Path(ckpt_dir)
    if not d.is_dir():
        return []
    out = []
    for p in d.iterdir():
        m = _STEP_DIR.match(p.name)
        if m and (p / META).is_file() and not _newer_attempt(p):
            out.append((int(m.group(1)), p))
    return sorted(out)


def newest_checkpoint(ckpt_dir: str | Path) -> Path | None:
    found = list_checkpoints(ckpt_dir)
    return found[-1][1] if found else None


def _newer_attempt(path: Path) -> bool:
    """Written by an attempt newer than this one: this process is fenced and must not resume it."""
    if _ATTEMPT is None:
        return False
    try:
        written_by = json.loads((path / META).read_text()).get("attempt")
    except (OSError, ValueError):
        return True
    return written_by is not None and int(written_by) > _ATTEMPT


def read_meta(path: str | Path) -> dict[str, Any]:
    return json.loads((Path(path) / META).read_text())


def gather_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    """Full, unwrapped model and optimizer state on CPU.

    A collective under FSDP: every rank must call it; rank 0 gets the state.
    """
    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_state_dict(model, optimizer, options=opts)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _save(obj: Any, path: Path) -> None:
    with path.open("wb") as fh:
        torch.save(obj, fh)
        fh.flush()
        os.fsync(fh.fileno())


def write_checkpoint(ckpt_dir: str | Path, step: int, *, model_state: dict, optim_state: dict,
                     train_state: dict, meta: dict, keep: int) -> Path:
    """Write ``step-N/`` atomically and keep the newest ``keep`` ones. Rank 0 only."""
    root = Path(ckpt_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step}"
    tmp = root / f".step-{step}.tmp-{os.getpid()}-{time.monotonic_ns()}"
    tmp.mkdir()
    try:
        _save(model_state, tmp / "model.pt")
        _save(optim_state, tmp / "optimizer.pt")
        _save(train_state, tmp / "state.pt")
        meta = {**meta, "step": step, "written_at": time.time(), "attempt": _ATTEMPT,
                "files": ["model.pt", "optimizer.pt", "state.pt"]}
        (tmp / META).write_text(json.dumps(meta, indent=2))
        _fsync_dir(tmp)
        fence.check(root, _ATTEMPT)
        if final.exists():  # the same step written again after a resume
            shutil.rmtree(final)
        os.rename(tmp, final)
        _fsync_dir(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        # A newer attempt that started between the check and the rename must
        # never find this folder: take it back.
        fence.check(root, _ATTEMPT)
    except fence.FencedError:
        shutil.rmtree(final, ignore_errors=True)
        raise
    prune_checkpoints(root, keep)
    return final


def prune_checkpoints(ckpt_dir: str | Path, keep: int) -> None:
    root = Path(ckpt_dir)
    for _, p in list_checkpoints(root)[:-keep] if keep > 0 else []:
        shutil.rmtree(p, ignore_errors=True)
    # Folders from writes that never finished (a crash mid-save).
    for p in root.glob(".step-*.tmp-*"):
        if f"-{os.getpid()}-" not in p.name:
            shutil.rmtree(p, ignore_errors=True)


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read one checkpoint. Every rank reads the same files, so no rank can
    start from a different state. ``weights_only`` keeps loading free of code."""
    p = Path(path)
    load = lambda name: torch.load(p / name, map_location="cpu", weights_only=True)  # noqa: E731
    return {"model": load("model.pt"), "optimizer": load("optimizer.pt"), "state": load("state.pt"),
            "meta": read_meta(p)}


def apply_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, model_state: dict,
                optim_state: dict) -> None:
    """Load full (unwrapped) state into a possibly wrapped model and its optimizer."""
    opts = StateDictOptions(full_state_dict=True, strict=True)
    set_state_dict(model, optimizer, model_state_dict=model_state, optim_state_dict=optim_state, options=opts)
