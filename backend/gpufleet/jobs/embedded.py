"""The embedded default's worker: a child process of ``serve``, no Redis.

Messages go through kombu's filesystem transport under the data dir. The
child gets the parent's settings through ``GPUFLEET_*`` variables, because
the parent's may come from arguments rather than the environment.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from gpufleet.config import Settings, StoreSettings

log = logging.getLogger(__name__)


def settings_env(settings: Settings) -> dict[str, str]:
    """``GPUFLEET_*`` variables that rebuild ``settings`` in a child process."""
    from gpufleet.secretfiles import SECRET_SETTINGS

    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_") or k.startswith("GPUFLEET_TEST_")}
    for name, value in settings.model_dump(mode="json").items():
        key = "GPUFLEET_" + name.upper()
        if name in SECRET_SETTINGS:
            # Secrets go as files, never in an environment a child could read or inherit.
            path = _secret_file(settings, name, value) if value and name != "secret_key" else None
            if path is not None:
                env[key + "_FILE"] = str(path)
            continue
        if value is None:
            env[key] = ""
        elif isinstance(value, (dict, list)):
            env[key] = json.dumps(value)
        else:
            env[key] = str(value)
    return env


def _secret_file(settings: StoreSettings, name: str, value: str) -> Path:
    """The file that holds secret setting ``name``: the one it was given in, else one written now (0600)."""
    from gpufleet.secretfiles import file_for

    given = file_for(name)
    if given is not None and given[1].is_file() and given[1].read_text().strip() == value:
        return given[1]
    d = settings.data_dir / "secrets"
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    d.chmod(0o700)
    path = d / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(value)
    return path


def worker_command(host_name: str | None = None, *, agent: bool = False, parent_fd: int | None = None) -> list[str]:
    cmd = [sys.executable, "-m", "gpufleet.jobs.worker"]
    if host_name:
        cmd += ["--host-name", host_name]
    if not agent:
        cmd.append("--no-agent")
    if parent_fd is not None:
        cmd += ["--parent-fd", str(parent_fd)]
    return cmd


def start_embedded_worker(settings: Settings, **popen_kw) -> subprocess.Popen:
    """Start the worker for this host; the agent stays in the API process (embedded bus)."""
    return _start(settings, lifeline=False, **popen_kw)[0]


def _start(settings: Settings, *, lifeline: bool, **popen_kw) -> tuple[subprocess.Popen, int | None]:
    """The worker process, and with ``lifeline`` the write end of a pipe it watches.

    Only this process holds the write end (pipes are not inherited by other
    children), so when this process dies, however it dies, the worker reads
    EOF and stops as on SIGTERM: its trainings checkpoint and go back to the
    queue. Without it a ``kill -9`` of ``serve`` left the worker and its
    trainings running with nobody to stop them, and the next ``serve``
    started a second worker for the same host beside it.
    """
    log = settings.logs_dir / "worker.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    out = popen_kw.pop("stdout", None) or open(log, "ab")  # noqa: SIM115 - the child owns it
    read_end = write_end = None
    if lifeline:
        read_end, write_end = os.pipe()
    try:
        proc = subprocess.Popen(
            worker_command(settings.host_name, agent=False, parent_fd=read_end),
            env=settings_env(settings),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            pass_fds=(read_end,) if read_end is not None else (),
            **popen_kw,
        )
    except BaseException:
        if write_end is not None:
            os.close(write_end)
        raise
    finally:
        if read_end is not None:
            os.close(read_end)
    return proc, write_end


class EmbeddedWorker:
    """The worker ``serve`` keeps running: started again whenever it dies.

    Without this, a worker that died (killed, or an unrecoverable broker
    error) left every later training `scheduled` and nothing said why. Its
    own trainings are not lost: their launchers die with it (the lifeline)
    and the lease recovery puts them back in the queue.
    """

    MAX_BACKOFF_S = 30.0

    def __init__(self, settings: Settings, **popen_kw) -> None:
        self.settings = settings
        self.popen_kw = popen_kw
        self.proc: subprocess.Popen | None = None
        self._lifeline: int | None = None
        self.restarts = 0
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> EmbeddedWorker:
        self._spawn()
        self._thread = threading.Thread(target=self._watch, name="gpufleet-worker-watch", daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        backoff = 1.0
        started = time.monotonic()
        while not self._stopping.wait(0.5):
            proc = self.proc
            if proc is None or proc.poll() is None:
                continue
            # A worker that ran for a while before dying starts again at once;
            # one that keeps dying at start-up is retried ever more slowly.
            backoff = 1.0 if time.monotonic() - started > 60 else min(2 * backoff, self.MAX_BACKOFF_S)
            log.error("the embedded worker exited with code %s; starting it again in %.0f s "
                      "(its log: %s)", proc.returncode, backoff, self.settings.logs_dir / "worker.log")
            if self._stopping.wait(backoff):
                return
            with self._lock:
                if self._stopping.is_set():
                    return
                self._spawn()
                self.restarts += 1
                started = time.monotonic()

    def _spawn(self) -> None:
        if self._lifeline is not None:
            os.close(self._lifeline)  # the previous worker's, which is gone
        self.proc, self._lifeline = _start(self.settings, lifeline=True, **self.popen_kw)

    def stop(self, timeout: float) -> None:
        """SIGTERM (each training checkpoints and is requeued as interrupted), then kill after ``timeout``."""
        with self._lock:
            self._stopping.set()
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except Exception:  # noqa: BLE001 - on any trouble, make sure it is gone
            proc.kill()
            proc.wait()
