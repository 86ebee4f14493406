"""A session's launcher: ``python -m gpufleet.interactive.launch SPEC.json --parent-fd N``.

The worker starts it as the session's owner (in the sandbox trainings use),
leading its own process group. It starts the session's one process with the
reserved GPUs made visible and ``GPUFLEET_SESSION_ID`` set: a holder for a
shell session (``gpufleet session shell`` opens shells beside it), or a
Jupyter server (JupyterLab when importable, else ``jupyter_server``) on
127.0.0.1 with the token gpufleet chose, served under ``/sessions/{id}/``.

Progress lines (``start``, ``session_ready``, ``session_activity``,
``alive``, ``stopped``, ``error``, ``end``) go to the spec's progress file.
SIGTERM (stop, idle, time limit, lease lost) ends the process group within
the grace; the launcher then exits ``INTERRUPTED``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpufleet.devices.device import DeviceSet
from gpufleet.interactive.jupyter import activity, answers
from gpufleet.engine import exitcodes as ec
from gpufleet.engine.lifeline import die_with_parent, launcher_main
from gpufleet.memberfs import write_new
from gpufleet.engine.progress import ProgressWriter

POLL_S = 0.2
ALIVE_EVERY_S = 5.0
TAIL_LINES = 20


@dataclass
class SessionSpec:
    session_id: str
    progress_file: str
    workdir: str
    gpu_indexes: list[int] = field(default_factory=list)
    backend: str = "cuda"
    simulated: bool = False
    jupyter: bool = False
    port: int = 0
    token: str = ""
    base_url: str = "/"
    activity_every_s: float = 5.0
    start_timeout_s: float = 120.0
    stop_grace_s: float = 10.0

    def devices(self) -> DeviceSet:
        """The session's GPUs, as its process is to see them."""
        return DeviceSet.of(self.backend, self.gpu_indexes)

    def write(self, path: Path) -> None:
        write_new(path, json.dumps(asdict(self)))  # the run dir is the training's account's: no link followed

    @classmethod
    def read(cls, path: str | Path) -> SessionSpec:
        return cls(**json.loads(Path(path).read_text()))


def session_env(spec: SessionSpec, base: dict[str, str]) -> dict[str, str]:
    """The session process's environment: the GPUs made visible, numbered as NVML does, and its id."""
    env = dict(base)
    env.update({
        **spec.devices().env(),
        "GPUFLEET_SESSION_ID": spec.session_id,
        "GPUFLEET_TRAINING_ID": spec.session_id,  # how the telemetry agent knows the session's processes
        "PYTHONUNBUFFERED": "1",
    })
    if spec.simulated:
        env["GPUFLEET_SIMULATED_GPUS"] = "1"
    if spec.jupyter:
        env["JUPYTER_TOKEN"] = spec.token  # not on the command line: ps shows argv to every account
    return env


# What a host needs for a notebook, and the fix a failed session's reason names.
NOTEBOOK_FIX = ("install gpufleet[sessions] on the session's host (pip install 'gpufleet[sessions]' in the "
                "worker's environment: JupyterLab and a Python kernel), or start a shell session instead")


def notebook_app() -> str | None:
    """The notebook server this host can start: JupyterLab, else a bare jupyter_server, else None."""
    for app in ("jupyterlab", "jupyter_server"):
        if importlib.util.find_spec(app) is not None:
            return app
    return None


def why_it_failed(code: int, output: list[str]) -> str:
    """A failed session's reason: the process's own last words, with the fix when a module is missing."""
    said = next((line.strip() for line in reversed(output)
                 if line.strip() and not line.lstrip().startswith(("File ", "Traceback", "^"))), "")
    reason = f"the session's process exited with {code}" + (f": {said[-300:]}" if said else "")
    if "No module named" in said and any(m in said for m in ("jupyter", "ipykernel", "notebook")):
        reason += f": {NOTEBOOK_FIX}"
    return reason


def command(spec: SessionSpec) -> list[str]:
    if not spec.jupyter:
        return ["sleep", "infinity"]
    app = notebook_app() or "jupyter_server"
    return [sys.executable, "-m", app, "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={spec.port}",
            "--ServerApp.port_retries=0", f"--ServerApp.base_url={spec.base_url}",
            f"--ServerApp.root_dir={spec.workdir}",
            # gpufleet's proxy checks who may come in (sign-in, Host, Origin) and adds the token;
            # the server itself listens on loopback only.
            "--ServerApp.allow_remote_access=True", "--ServerApp.allow_origin=*",
            # JupyterLab puts its page's token (the page's key, which gpufleet's proxy writes in) on its
            # WebSockets' URLs too, as the proxy wants it there (api/proxy/passes.py).
            "--ServerApp.tornado_settings={'page_config_data': {'appendToken': 'true'}}",
            # A single-user server runs sessions as its own account, which may be root.
            *(["--ServerApp.allow_root=True"] if os.geteuid() == 0 else [])]


def _cannot_run(progress: ProgressWriter, kind: str, message: str) -> int:
    print(f"[gpufleet] {message}", flush=True)
    progress.write("error", rank=None, kind=kind, message=message)
    progress.write("end", status="failed", exit_code=ec.CANNOT_RUN)
    return ec.CANNOT_RUN


def _copy_output(stream: Any, tail: deque[str]) -> None:  # a pipe
    """The session process's output into the session's log (this launcher's stdout), its last lines kept."""
    for raw in iter(stream.readline, b""):
        text = raw.decode(errors="replace")
        tail.append(text.rstrip())
        sys.stdout.write(text)
        sys.stdout.flush()
    stream.close()


def _end(proc: subprocess.Popen, grace_s: float) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(POLL_S)
    if proc.poll() is None:
        proc.kill()
    proc.wait()


class Watch:
    """Readiness, then activity of the session's process; the heartbeat in between."""

    def __init__(self, spec: SessionSpec, progress: ProgressWriter):
        self.spec, self.progress = spec, progress
        self.ready = not spec.jupyter
        self.started = time.monotonic()
        self.last_alive = self.last_activity = 0.0

    def poll(self) -> str | None:
        """A reason to give up (the notebook never answered), else None."""
        now = time.monotonic()
        if not self.ready:
            if answers(self.spec.port, self.spec.base_url, self.spec.token):
                self.ready = True
                self.progress.write("session_ready", jupyter=True, gpu_ids=self.spec.gpu_indexes)
            elif now - self.started > self.spec.start_timeout_s:
                return f"the Jupyter server did not answer within {self.spec.start_timeout_s:g}s"
        elif self.spec.jupyter and now - self.last_activity >= self.spec.activity_every_s:
            self.last_activity = now
            seen = activity(self.spec.port, self.spec.base_url, self.spec.token)
            if seen is not None:
                self.progress.write("session_activity", **seen)
        if now - self.last_alive >= ALIVE_EVERY_S:
            self.last_alive = now
            self.progress.write("alive")
        return None


def run(spec: SessionSpec) -> int:
    progress = ProgressWriter(spec.progress_file)
    stop = {"requested": False}

    def on_term(signum: int, frame: Any) -> None:
        stop["requested"] = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    argv = command(spec)
    progress.write("start", world_size=1, kind="session", jupyter=spec.jupyter, argv=argv,
                   devices=spec.devices().labels,
                   visible_devices=spec.devices().value, simulated=spec.simulated)
    if spec.jupyter and notebook_app() is None:
        return _cannot_run(progress, "missing_file", f"No module named jupyter_server on this host: {NOTEBOOK_FIX}")
    Path(spec.workdir).mkdir(parents=True, exist_ok=True)
    try:
        proc = subprocess.Popen(argv, cwd=spec.workdir, env=session_env(spec, dict(os.environ)),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                preexec_fn=die_with_parent)
    except OSError as exc:
        return _cannot_run(progress, "missing_file", f"cannot start {argv[0]!r}: {exc}")
    print(f"[gpufleet] session process {proc.pid}: {' '.join(argv)}", flush=True)
    output: deque[str] = deque(maxlen=TAIL_LINES)
    threading.Thread(target=_copy_output, args=(proc.stdout, output), daemon=True).start()
    if not spec.jupyter:
        progress.write("session_ready", jupyter=False, gpu_ids=spec.gpu_indexes, pid=proc.pid)
    watch = Watch(spec, progress)
    while proc.poll() is None and not stop["requested"]:
        failure = watch.poll()
        if failure:
            _end(proc, spec.stop_grace_s)
            progress.write("error", rank=None, kind="error", message=failure)
            progress.write("end", status="failed", exit_code=ec.RANK_FAILED)
            return ec.RANK_FAILED
        time.sleep(POLL_S)
    if stop["requested"]:
        _end(proc, spec.stop_grace_s)
        progress.write("stopped", message="stopped by SIGTERM", step=None)
        progress.write("end", status="interrupted", exit_code=ec.INTERRUPTED)
        return ec.INTERRUPTED
    code = proc.returncode
    if code != 0:
        time.sleep(POLL_S)  # the copier reads the process's last lines
        progress.write("error", rank=None, kind="error", message=why_it_failed(code, list(output)))
        progress.write("end", status="failed", exit_code=ec.RANK_FAILED)
        return ec.RANK_FAILED
    progress.write("end", status="succeeded", exit_code=ec.SUCCEEDED)
    return ec.SUCCEEDED


def main(argv: list[str] | None = None) -> int:
    return launcher_main(argv, "gpufleet.interactive.launch", SessionSpec.read, run)


if __name__ == "__main__":
    sys.exit(main())
