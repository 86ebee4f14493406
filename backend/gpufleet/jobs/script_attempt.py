"""The worker's side of a script training: unpack the code, write the launch spec, clean up.

The supervisor runs ``python -m gpufleet.trainings.script_launch`` instead of
the recipe launcher for a training of kind ``script``; everything else
(lease, progress, cancel, outcome) is the same.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from pathlib import Path

from gpufleet.config import CodeSettings, StoreSettings
from gpufleet.db.models import Training
from gpufleet.db.session import session_scope
from gpufleet.jobs.isolation import Isolation
from gpufleet.jobs import share_watch
from gpufleet.engine import stopfile
from gpufleet.rankpath.gpufleet_share import SHARE_ENV
from gpufleet.trainings import code, files, script, venv
from gpufleet.trainings.environment import EnvPolicy

log = logging.getLogger(__name__)

MODULE = "gpufleet.trainings.script_launch"


def work_dir(settings: StoreSettings, training_id: uuid.UUID) -> Path:
    return settings.data_dir / "work" / str(training_id)


def write_spec(store_settings: StoreSettings, code_settings: CodeSettings, t: Training, devices: list[str],
               ranks_on_cpu: bool, rdir: Path, ckpt_dir: Path, stop_grace_s: float) -> tuple[Path, Path]:
    """Unpack the training's code into its work dir and write the launcher's spec."""
    if not t.code_hash or not t.argv:
        raise ValueError("the training has no code or argv")
    wdir = work_dir(store_settings, t.id)
    with session_scope(store_settings) as sess:
        code.prepare_workdir(store_settings, code_settings, sess, t.code_hash, wdir)
    rdir.mkdir(parents=True, exist_ok=True)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    progress = rdir / f"progress-{t.attempt}.jsonl"
    spec = script.attempt_spec(
        store_settings, code_settings, t, workdir=wdir, progress=progress, checkpoint_dir=ckpt_dir,
        output_dir=files.output_dir(store_settings, t.id), gpu_indexes=[int(d.split(":", 1)[1]) for d in devices],
        backend=devices[0].split(":", 1)[0] if devices else "cuda", ranks_on_cpu=ranks_on_cpu,
        stop_grace_s=stop_grace_s)
    if (share := share_watch.share_mb(t)) is not None:  # the ranks cap PyTorch's allocator at it
        spec.env[SHARE_ENV] = str(share)
    path = rdir / f"spec-{t.attempt}.json"
    spec.write(path)
    return path, progress


def open_env_cache(store_settings: StoreSettings, code_settings: CodeSettings, t: Training, iso: Isolation) -> None:
    """A training that builds its own packages does so as its owner's account: it gets that owner's
    environment cache (kept across trainings, also out of a sandbox) and reads the local find-links folders."""
    if not (t.env or {}).get(script.REQUIREMENTS_KEY):
        return
    iso.keep.append(venv.owner_cache_dir(store_settings, code_settings, t.owner or "local"))
    iso.read += [Path(p) for p in code_settings.env_find_links if os.path.isabs(p) and os.path.isdir(p)]


def output_dir(settings: StoreSettings, training_id: uuid.UUID) -> Path:
    return files.output_dir(settings, training_id)


def mark_stop(progress: Path) -> None:
    """Create the attempt's stop file (``GPUFLEET_STOP_FILE``: the launcher names it so too)."""
    stopfile.mark(f"{progress}.stop")


def launch_env(settings: CodeSettings, training_id: uuid.UUID) -> dict[str, str]:
    """The launcher's environment: the worker's without gpufleet's secrets, plus the training id."""
    return dict(script.process_env(os.environ, EnvPolicy.of(settings)), PYTHONUNBUFFERED="1",
                GPUFLEET_TRAINING_ID=str(training_id))


def cleanup(settings: StoreSettings, training_id: uuid.UUID) -> None:
    """Remove the work dir of a training that ended (its code blob stays stored)."""
    shutil.rmtree(work_dir(settings, training_id), ignore_errors=True)
