"""What ties a launcher to its worker, and its ranks to the launcher.

- A rank dies with the launcher that started it (``PR_SET_PDEATHSIG``), so no
  rank outlives it.
- A launcher watches the read end of a pipe whose write end only its worker
  holds (``--parent-fd``): when the worker dies, even by SIGKILL, the pipe
  reads EOF and the launcher exits at once, taking its ranks with it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from gpufleet.engine import exitcodes


def die_with_parent() -> None:
    """SIGKILL this process when the one that started it exits (Linux)."""
    if sys.platform != "linux":
        return
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def on_pipe_closed(fd: int, action: Callable[[], None], name: str) -> None:
    """Run ``action`` in a daemon thread once the pipe ``fd`` reads EOF: its writer is gone, however it died."""

    def watch() -> None:
        try:
            while os.read(fd, 64):
                pass
        except OSError:
            pass
        action()

    threading.Thread(target=watch, name=name, daemon=True).start()


def watch_parent(fd: int) -> None:
    """Exit as soon as the pipe from the worker reads EOF (the worker is gone)."""

    def gone() -> None:
        try:
            print("gpufleet launch: the worker that supervised this training is gone; stopping every rank",
                  file=sys.stderr, flush=True)
        except (OSError, ValueError):
            # The output is a pipe to that worker: with its reader gone the write fails
            # (EPIPE). That must not end this thread before the exit below.
            pass
        # No checkpoint: the lease is lost, and a newer attempt owns the folder
        # soon. The ranks get SIGKILL from PR_SET_PDEATHSIG when this exits.
        os._exit(exitcodes.INTERRUPTED)

    on_pipe_closed(fd, gone, "gpufleet-parent-watch")


def start_launcher(argv: list[str], module: str, *, die_with_worker: bool = True) -> str | None:
    """The start every launcher shares: read ``SPEC.json [--parent-fd N]`` and tie this process to its worker.

    With ``die_with_worker`` this process gets SIGKILL when its parent exits
    (and gives up at once if the parent ended before that took effect); with
    ``--parent-fd`` it exits as soon as the worker's pipe closes. Returns the
    spec's path, or ``None`` after saying why on stderr.
    """
    args = list(argv)
    parent_fd = None
    if len(args) == 3 and args[1] == "--parent-fd" and args[2].isdigit():
        parent_fd, args = int(args[2]), args[:1]
    if len(args) != 1:
        print(f"usage: python -m {module} SPEC.json [--parent-fd N]", file=sys.stderr)
        return None
    if die_with_worker:
        parent = os.getppid()
        die_with_parent()
        if os.getppid() != parent:
            print(f"{module}: the worker that started this launcher is gone already", file=sys.stderr)
            return None
    if parent_fd is not None:
        watch_parent(parent_fd)
    return args[0]


def launcher_main(argv: list[str] | None, module: str, read: Callable[[str], Any], run: Callable[[Any], int], *,
                  die_with_worker: bool = True, bad_spec: int = exitcodes.LAUNCHER_ERROR) -> int:
    """The ``main`` of every launcher (a recipe's, a script's, a session's): tie this process to its worker,
    read its spec with ``read`` and run it with ``run``. A spec that cannot be read ends it with ``bad_spec``."""
    spec_path = start_launcher(sys.argv[1:] if argv is None else argv, module, die_with_worker=die_with_worker)
    if spec_path is None:
        return exitcodes.LAUNCHER_ERROR
    try:
        spec = read(spec_path)
    except (OSError, ValueError, TypeError) as exc:
        print(f"[gpufleet] {module}: cannot read the launch spec {spec_path}: {exc}", file=sys.stderr)
        return bad_spec
    return run(spec)
