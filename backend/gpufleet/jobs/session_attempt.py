"""The worker's side of a session: choose the notebook's port and token, write the launcher's spec.

The supervisor runs ``python -m gpufleet.interactive.launch`` for a row of kind
``session``, as its owner's account in the trainings' sandbox; lease,
progress, cancel and the end are the same as for a training.
"""

from __future__ import annotations

import os
import secrets
import socket
from pathlib import Path

from sqlalchemy import update

from gpufleet import memberfs
from gpufleet.config import CodeSettings, SessionSettings, StoreSettings, WorkerSettings
from gpufleet.db.interactive import TrainingSession
from gpufleet.db.session import session_scope, write_session
from gpufleet.jobs.isolation import Isolation
from gpufleet.interactive.launch import SessionSpec
from gpufleet.interactive.view import base_url
from gpufleet.trainings import script
from gpufleet.trainings.environment import EnvPolicy
from gpufleet.lifecycle.models import Training

MODULE = "gpufleet.interactive.launch"
ACTIVITY_EVERY_S = 5.0


def _free_loopback_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def workdir(iso: Isolation, rdir: Path) -> Path:
    """Where the session's process starts: its account's home when it has one, else its own folder."""
    return iso.home if iso.home is not None else rdir / "home"


def write_spec(store_settings: StoreSettings, worker_settings: WorkerSettings, session_settings: SessionSettings,
               t: Training, devices: list[str], ranks_on_cpu: bool, rdir: Path, iso: Isolation) -> tuple[Path, Path]:
    """Store the notebook's port and token (what the proxy reads), then write the launcher's spec."""
    with session_scope(store_settings) as sess:
        side = sess.get(TrainingSession, t.id)
        jupyter = bool(side and side.jupyter)
    port, token = (_free_loopback_port(), secrets.token_urlsafe(32)) if jupyter else (None, None)
    with write_session(store_settings) as sess:
        sess.execute(update(TrainingSession).where(TrainingSession.training_id == t.id)
                     .values(port=port, token=token, ready_at=None, active_at=None, idle_warned_at=None)
                     .execution_options(synchronize_session=False))
    rdir.mkdir(parents=True, exist_ok=True)
    progress = rdir / f"progress-{t.attempt}.jsonl"
    memberfs.remove(progress)
    wdir = workdir(iso, rdir)
    if wdir not in iso.write and iso.home is None:
        iso.write.append(wdir)
    spec = SessionSpec(
        session_id=str(t.id), progress_file=str(progress), workdir=str(wdir),
        gpu_indexes=[int(d.split(":", 1)[1]) for d in devices],
        backend=devices[0].split(":", 1)[0] if devices else "cuda", simulated=ranks_on_cpu,
        jupyter=jupyter, port=port or 0, token=token or "", base_url=base_url(t.id),
        activity_every_s=ACTIVITY_EVERY_S, start_timeout_s=session_settings.session_start_timeout_s,
        stop_grace_s=min(worker_settings.stop_grace_s, 30.0),
    )
    path = rdir / f"spec-{t.attempt}.json"
    spec.write(path)
    return path, progress


def launch_env(settings: CodeSettings, training_id: object) -> dict[str, str]:
    """The launcher's environment: the worker's without gpufleet's secrets, plus the session's id."""
    return dict(script.process_env(os.environ, EnvPolicy.of(settings)), PYTHONUNBUFFERED="1",
                GPUFLEET_TRAINING_ID=str(training_id), GPUFLEET_SESSION_ID=str(training_id))
