"""Run a `gpufleet` command on a pseudo-terminal of a given size, as a person at a terminal would."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time

GPUFLEET = [sys.executable, "-m", "gpufleet.cli"]
# Styles (bold, dim): the text is what is measured.
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _plain_env(env: dict[str, str] | None) -> dict[str, str]:
    # The size comes from the terminal itself, and colour codes would only get in the way of reading it.
    env = {k: v for k, v in (env or os.environ).items()
           if k not in {"COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE"}}
    return {**env, "TERM": "xterm", "NO_COLOR": "1"}


def in_terminal(args: list[str], env: dict[str, str] | None = None, cols: int = 80, timeout: float = 120) -> str:
    """What ``gpufleet ARGS`` shows on a ``cols``-wide terminal (stdout and stderr), line ends as ``\\n``."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, cols, 0, 0))
    proc = subprocess.Popen([*GPUFLEET, *args], stdin=follower, stdout=follower, stderr=follower,
                            env=_plain_env(env), close_fds=True)
    os.close(follower)
    chunks = []
    deadline = time.monotonic() + timeout
    poller = select.poll()  # not select.select: a long run holds descriptors above 1024
    poller.register(leader, select.POLLIN)
    while time.monotonic() < deadline:
        if poller.poll(500):
            try:
                data = os.read(leader, 65536)
            except OSError:  # the terminal closed: the command ended
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    os.close(leader)
    proc.wait(10)
    return ANSI.sub("", b"".join(chunks).decode(errors="replace").replace("\r\n", "\n"))


def in_pipe(args: list[str], env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """``gpufleet ARGS`` with its output going to a pipe."""
    return subprocess.run([*GPUFLEET, *args], env=_plain_env(env), capture_output=True, text=True, timeout=timeout)
