"""Starting a training's launcher process: its own session, its lifeline, its account and sandbox.

The launcher runs as a subprocess in its own session (process group), so one
``killpg`` reaches every rank. It is tied to the worker by a pipe
(``--parent-fd``): if the worker dies, even by SIGKILL, the launcher and its
ranks exit at once. A member's training runs as its owner's Unix account,
in a sandbox where one is available (``gpufleet.jobs.isolation``).
A recipe or script training starts from a warm pool when a member is ready: the
worker's own, or that member's (in her sandbox too)
(``gpufleet.jobs.warmpool``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

from gpufleet.jobs import warmpool
from gpufleet.jobs.isolation import Isolation
from gpufleet.jobs.logs import BoundedLog, pump
from gpufleet.trainings.environment import DEFAULT_POLICY, EnvPolicy, training_environment


def launch(spec_path: Path, log_file: BoundedLog, training_id: uuid.UUID,
           module: str = "gpufleet.engine.launch", env: dict[str, str] | None = None,
           isolation: Isolation | None = None, policy: EnvPolicy = DEFAULT_POLICY) -> tuple[subprocess.Popen, int]:
    """Start a launcher; returns it and the write end of its lifeline (close it once it exited)."""
    # The telemetry agent recognises a training's processes by this variable
    # (the ranks inherit it), so they never count as foreign load.
    if env is None:  # an allow-list: no server secrets
        env = training_environment(os.environ, policy, PYTHONUNBUFFERED="1", GPUFLEET_TRAINING_ID=str(training_id))
    iso = isolation or Isolation()
    iso.prepare()
    pool = warmpool.for_launch(module, env, iso)
    if pool is not None and (warm := pool.take(iso.env(env), str(spec_path), iso.write, module)):
        log_file.line(f"[gpufleet] the launcher is warm launcher {warm[0].pid} (torch already imported)")
        pump(warm[0].stdout, log_file)  # type: ignore[arg-type]
        return warm
    # Only this process holds the write end (close_fds keeps it from every
    # other child), so the launcher reads EOF exactly when this worker is gone.
    lifeline_r, lifeline_w = os.pipe()
    try:
        proc = subprocess.Popen(
            iso.command([sys.executable, "-m", module, str(spec_path), "--parent-fd", str(lifeline_r)]),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # own process group: one killpg reaches every rank
            pass_fds=(lifeline_r,),
            env=iso.env(env),
            **iso.popen_kwargs(),
        )
    except BaseException:
        os.close(lifeline_w)
        raise
    finally:
        os.close(lifeline_r)
    pump(proc.stdout, log_file)  # type: ignore[arg-type]
    return proc, lifeline_w
