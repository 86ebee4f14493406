"""A real `gpufleet serve` process for the hostile-input tests, stopped with its process group."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

# Random-looking, as `gpufleet secret` makes: serve refuses predictable secrets.
STRONG_SECRET = "Jx4q-7TnV0pLr2sWcY9eHb1KmUa8ZgQd3FoXi6NtB5yE"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gpufleet() -> list[str]:
    exe = Path(sys.executable).with_name("gpufleet")
    return [str(exe)] if exe.exists() else [sys.executable, "-c", "from gpufleet.cli import main; main()"]


def server_env(data_dir: Path, **extra: str) -> dict[str, str]:
    """This process's environment without any GPUFLEET_ setting, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_") or k.startswith("GPUFLEET_TEST_")}
    env.update(GPUFLEET_DATA_DIR=str(data_dir), GPUFLEET_SIMULATE="2xH100-80GB", GPUFLEET_HOST_NAME="sim-host",
               PYTHONUNBUFFERED="1", **extra)
    return env


@dataclass
class Served:
    url: str
    port: int
    log: Path
    pid: int

    def log_tail(self, n: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""


@contextmanager
def serve(data_dir: Path, *args: str, **env: str) -> Iterator[Served]:
    """`gpufleet serve` on a free loopback port with ``env`` (no GPUFLEET_ variable of the tests)."""
    port = free_port()
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    log_path = data_dir.parent / f"serve-{port}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [*gpufleet(), "serve", "--port", str(port), *args],
            env=server_env(data_dir, **env), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        served = Served(f"http://127.0.0.1:{port}", port, log_path, proc.pid)
        try:
            deadline = time.monotonic() + 120
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"gpufleet serve exited ({proc.returncode}):\n{served.log_tail()}")
                try:
                    if httpx.get(f"{served.url}/healthz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"gpufleet serve did not answer in 120 s:\n{served.log_tail()}")
                time.sleep(0.3)
            yield served
        finally:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(timeout=30)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    proc.wait(timeout=10)


def cli(data_dir: Path, *args: str, **env: str) -> str:
    """Run a `gpufleet` command against ``data_dir``; its stdout."""
    out = subprocess.run([*gpufleet(), *args], env=server_env(data_dir, **env), check=True, capture_output=True,
                         text=True, timeout=120)
    return out.stdout


def make_token(data_dir: Path, user: str, role: str, **env: str) -> str:
    """A user made with the CLI, and a token for it."""
    cli(data_dir, "db", "upgrade", **env)
    cli(data_dir, "users", "add", user, "--role", role, **env)
    return cli(data_dir, "tokens", "create", user, **env).strip().splitlines()[-1].strip()
