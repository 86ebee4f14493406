"""Real servers for the tests, started one way each.

- ``serve_process(data_dir, ...)``: `gpufleet serve` as a user starts it, a
  subprocess in a process group of its own (its embedded worker and trainings
  stop with it), ready once ``/healthz`` answers.
- ``serve_inprocess(app)``: an ASGI app under uvicorn in a thread of the test
  process, on a socket bound before it starts, ready once uvicorn has started.
- ``free_port()``: a loopback port nothing listens on now (for what the tests
  cannot hand a bound socket to: another process, a restart on the same port).
- ``cli(data_dir, ...)`` and ``make_token``: the `gpufleet` CLI on the same
  data dir and environment, to prepare what a served process will find.

Fixtures in the conftests build on these; no test starts a server by hand.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

# Random-looking, as `gpufleet secret` makes: serve refuses predictable secrets.
STRONG_SECRET = "Jx4q-7TnV0pLr2sWcY9eHb1KmUa8ZgQd3FoXi6NtB5yE"


def free_port() -> int:
    """A loopback port free now whose next port is free too (`serve` listens for notebooks on its port + 1
    unless told otherwise), taken below the kernel's range for outgoing connections: a port picked from
    that range can be taken by any connection's local end in the minutes before a server binds it (a
    start.sh install's notebooks port was, and the start failed)."""
    low, _ = _ephemeral_range()
    while True:
        port = random.randrange(10_000, max(10_002, low - 1))
        with socket.socket() as s, socket.socket() as after:
            try:
                s.bind(("127.0.0.1", port))
                after.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            return port


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def gpufleet() -> list[str]:
    """The `gpufleet` command of this environment."""
    exe = Path(sys.executable).with_name("gpufleet")
    return [str(exe)] if exe.exists() else [sys.executable, "-c", "from gpufleet.cli import main; main()"]


def socket_path(data_dir: Path) -> Path:
    """The Unix socket of a server on ``data_dir``: short (a socket path has at most 107 bytes), under
    /tmp where every account can reach it, and its own, so that servers of parallel tests never meet."""
    digest = hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"gpufleet-test-{digest}" / "gpufleet.sock"


def serve_env(data_dir: Path, **extra: str | None) -> dict[str, str]:
    """This process's environment without the GPUFLEET_ settings a developer may have exported
    (the tests' own GPUFLEET_TEST_ ones stay), on ``data_dir`` with two simulated H100s, plus ``extra``.

    Servers run in single-user mode (``GPUFLEET_AUTH=off``: loopback callers are the admin ``local``)
    unless ``extra`` says otherwise; ``GPUFLEET_AUTH=None`` removes it (the product's default: sign-in),
    as ``None`` removes any variable. The CLI of the same environment reaches the server through its
    socket (``socket_path``) as the account that runs it.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_") or k.startswith("GPUFLEET_TEST_")}
    env.update(GPUFLEET_DATA_DIR=str(data_dir), GPUFLEET_SIMULATE="2xH100-80GB", GPUFLEET_HOST_NAME="sim-host",
               GPUFLEET_AUTH="off", GPUFLEET_UNIX_SOCKET=str(socket_path(data_dir)), PYTHONUNBUFFERED="1",
               GPUFLEET_WARM_POOL_SIZE="0", GPUFLEET_ESTIMATE_WARM="false",
               GPUFLEET_ALLOW_SERVICES_WITHOUT_PASSWORD="true")
    for key, value in extra.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def cli(data_dir: Path, *args: str, **env: str | None) -> str:
    """Run a `gpufleet` command against ``data_dir`` with ``serve_env(data_dir, **env)``; its stdout."""
    out = subprocess.run([*gpufleet(), *args], env=serve_env(data_dir, **env), check=True, capture_output=True,
                         text=True, timeout=120)
    return out.stdout


def make_token(data_dir: Path, user: str, role: str, **env: str | None) -> str:
    """A user made with the CLI, and a token for it."""
    cli(data_dir, "db", "upgrade", **env)
    cli(data_dir, "users", "add", user, "--role", role, **env)
    return cli(data_dir, "tokens", "create", user, **env).strip().splitlines()[-1].strip()


@dataclass
class ServedProcess:
    url: str
    port: int
    data_dir: Path
    log: Path
    proc: subprocess.Popen[bytes]
    sessions_port: int = 0  # where its sessions' notebooks are served (their own origin)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_tail(self, n: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM to its process group, SIGKILL after ``timeout``; safe to call twice."""
        if self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=timeout)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=10)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@contextmanager
def serve_process(data_dir: Path, *args: str, port: int | None = None, host: str = "127.0.0.1",
                  ready_timeout: float = 120, cwd: Path | None = None,
                  **env: str | None) -> Iterator[ServedProcess]:
    """`gpufleet serve --host HOST --port PORT ARGS` on ``data_dir`` with ``serve_env(data_dir, **env)``,
    started in ``cwd`` (this process's own when None).

    Its output goes to ``serve-<port>.log`` beside the data dir (appended: a
    restart on the same port continues it). Stopped on exit, if the test has
    not stopped it already.
    """
    port = port or free_port()
    # The notebooks' origin: a free port of its own (the product's default, the API's port + 1, may be taken).
    env.setdefault("GPUFLEET_SESSIONS_PORT", str(free_port()))
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = data_dir.parent / f"serve-{port}.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([*gpufleet(), "serve", "--host", host, "--port", str(port), *args],
                                env=serve_env(data_dir, **env), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=cwd)
    served = ServedProcess(f"http://127.0.0.1:{port}", port, data_dir, log_path, proc,
                           int(env["GPUFLEET_SESSIONS_PORT"] or 0))
    try:
        deadline = time.monotonic() + ready_timeout
        while not _healthy(served.url):
            if proc.poll() is not None:
                raise RuntimeError(f"gpufleet serve exited ({proc.returncode}):\n{served.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"gpufleet serve did not answer in {ready_timeout:.0f} s:\n{served.log_tail()}")
            time.sleep(0.3)
        yield served
    finally:
        served.stop()
        shutil.rmtree(socket_path(data_dir).parent, ignore_errors=True)


@dataclass
class ServedInProcess:
    url: str
    port: int
    server: Any  # uvicorn.Server

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"


@contextmanager
def serve_inprocess(app: Any, *, lifespan: str = "off", ready_timeout: float = 30,
                    **config: Any) -> Iterator[ServedInProcess]:
    """``app`` under uvicorn in a thread on a free loopback port; ``config``: more ``uvicorn.Config`` options."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan=lifespan, **config))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + ready_timeout
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"uvicorn did not start in {ready_timeout:.0f} s")
            time.sleep(0.02)
        yield ServedInProcess(f"http://127.0.0.1:{port}", port, server)
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
        # The live stream's hub listens on the process-wide bus: it must not outlive its server.
        stream = getattr(getattr(app, "state", None), "live_stream", None)
        if stream is not None:
            stream.close()


def wait_served(what: str, probe: Callable[[], object], srv: ServedProcess, timeout: float = 240) -> object:
    """``probe()``'s first true answer, polled every half second; past ``timeout`` an AssertionError naming
    ``what`` with the tail of the server's log."""
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen in {timeout:.0f} s\n--- serve log ---\n{srv.log_tail()}")
        time.sleep(0.5)
