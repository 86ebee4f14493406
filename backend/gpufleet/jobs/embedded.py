"""The embedded default's worker: a child process of ``serve``, no Redis.

Messages go through kombu's filesystem transport under the data dir. The
child gets the parent's settings through ``GPUFLEET_*`` variables, because
the parent's may come from arguments rather than the environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from gpufleet.config import Settings


def settings_env(settings: Settings) -> dict[str, str]:
    """``GPUFLEET_*`` variables that rebuild ``settings`` in a child process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_") or k.startswith("GPUFLEET_TEST_")}
    for name, value in settings.model_dump(mode="json").items():
        key = "GPUFLEET_" + name.upper()
        if value is None:
            env[key] = ""
        elif isinstance(value, (dict, list)):
            env[key] = json.dumps(value)
        else:
            env[key] = str(value)
    return env


def worker_command(host_name: str | None = None, *, agent: bool = False) -> list[str]:
    cmd = [sys.executable, "-m", "gpufleet.jobs.worker"]
    if host_name:
        cmd += ["--host-name", host_name]
    if not agent:
        cmd.append("--no-agent")
    return cmd


def start_embedded_worker(settings: Settings, **popen_kw) -> subprocess.Popen:  # noqa: ANN003
    """Start the worker for this host; the agent stays in the API process (embedded bus)."""
    log = settings.logs_dir / "worker.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    out = popen_kw.pop("stdout", None) or open(log, "ab")  # noqa: SIM115 - the child owns it
    return subprocess.Popen(  # noqa: S603 - our own interpreter and module
        worker_command(settings.host_name, agent=False),
        env=settings_env(settings),
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        **popen_kw,
    )
