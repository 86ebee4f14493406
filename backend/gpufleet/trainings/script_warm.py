"""A script's ranks forked from a warm launcher's rank server, torch already imported, instead of started
as fresh interpreters that import it again.

A warm launcher (``engine/warm.py``) that takes a script training runs the
script launcher in its own process, and its rank server (``engine/rankserver.py``,
started before the training was known: the member's account and sandbox, the
training environment's allow-list, no CUDA initialised) forks each rank. The
rank then becomes what ``python train.py ...`` would have been:

- the rank's environment (torchrun's variables, gpufleet's, the request's
  ``env``) replaces the server's before the script runs; its working
  directory is the training's; its stdin is ``/dev/null``;
- its stdout and stderr are pipes to the launcher, passed with the fork
  (multiprocessing sends their descriptors to the server), so the launcher
  prefixes and reads its lines exactly as a spawned rank's;
- the script runs as ``__main__`` (``runpy``) with ``sys.argv`` as the
  interpreter would set it and its folder first on ``sys.path``; SIGTERM and
  SIGINT act as in a fresh interpreter (the server ignores SIGTERM);
- its exit status is the interpreter's: ``sys.exit(n)`` gives n, an uncaught
  exception prints its traceback and gives 1, and ``atexit`` handlers run.

Only where the rank would have run in this very interpreter, with nothing read
at start-up that differs (:func:`why_cold`); any other rank starts cold, as
before, and the launcher's log says why.
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import sys
from collections.abc import Mapping
from typing import IO, Any

from gpufleet.rankpath import gpufleet_share

# Variables a request may set that an interpreter, or a library the rank server has imported, reads
# when it starts: a forked rank would not see its own value.
READ_AT_START = ("PYTHON", "OMP_", "MKL_", "KMP_", "OPENBLAS_", "GOMP_", "LD_", "MALLOC_", "TORCH_")
_SERVER = [False]


def use_rank_server() -> None:
    """This launcher has a preloaded rank server: its eligible ranks are forked from it."""
    _SERVER[0] = True


def has_server() -> bool:
    return _SERVER[0]


def _interpreter(program: str, env: Mapping[str, str]) -> str | None:
    found = program if "/" in program else shutil.which(program, path=env.get("PATH", os.defpath))
    return os.path.realpath(found) if found else None


def why_cold(argv: list[str], env: Mapping[str, str], request_env: Mapping[str, str],
             environment: object | None) -> str | None:
    """None where a rank of ``argv`` may be forked from this process's rank server; else why not, in words.

    ``env``: the rank's whole environment; ``request_env``: what the training's request set in it;
    ``environment``: the training's own environment to build (a venv: another interpreter)."""
    if not _SERVER[0]:
        return "this launcher has no rank server"
    if environment:
        return "the training runs in an environment of its own (its requirements)"
    if len(argv) < 2 or _interpreter(argv[0], env) != os.path.realpath(sys.executable):
        return f"{argv[0]!r} is not this launcher's Python ({sys.executable})"
    if argv[1].startswith("-") and not (argv[1] == "-m" and len(argv) > 2):
        return f"the interpreter is given the option {argv[1]!r} (only a script or -m MODULE starts warm)"
    read = sorted(k for k in request_env if k.startswith(READ_AT_START))
    if read:
        return f"the request sets {', '.join(read)}, read when an interpreter starts"
    return None


class ForkedRank:
    """A rank forked from the rank server, seen through what :class:`subprocess.Popen` offers the launcher."""

    def __init__(self, proc: Any, stdout: IO[bytes], stderr: IO[bytes]) -> None:
        self.proc = proc
        self.pid: int = proc.pid
        self.stdout = stdout
        self.stderr = stderr

    def poll(self) -> int | None:
        return self.proc.exitcode  # a negative number for a signal, as Popen's returncode

    def send_signal(self, sig: int) -> None:
        if self.proc.exitcode is None:
            os.kill(self.pid, sig)

    def wait(self) -> int:
        self.proc.join()
        return self.proc.exitcode


def fork_rank(argv: list[str], workdir: str, env: dict[str, str]) -> ForkedRank:
    """Start one rank from the rank server, its stdout and stderr pipes to this process."""
    import multiprocessing
    from multiprocessing.connection import Connection

    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    ends = [Connection(out_w, readable=False), Connection(err_w, readable=False)]
    try:
        proc = multiprocessing.get_context("forkserver").Process(
            target=rank_main, args=(argv, workdir, env, *ends), name=f"gpufleet-rank-{env.get('RANK', '?')}")
        proc.start()  # the write ends go to the server with the fork's request (multiprocessing's DupFd)
    except BaseException:
        os.close(out_r)
        os.close(err_r)
        raise
    finally:
        for end in ends:
            end.close()
    return ForkedRank(proc, os.fdopen(out_r, "rb"), os.fdopen(err_r, "rb"))


def rank_main(argv: list[str], workdir: str, env: dict[str, str], out: Any, err: Any) -> None:
    """In the forked rank: become ``argv`` run by this interpreter, then exit with its status."""
    from gpufleet.engine.lifeline import die_with_parent

    die_with_parent()  # the server: it dies with the launcher
    for fd, end in ((1, out), (2, err)):
        os.dup2(end.fileno(), fd)
        end.close()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(workdir)
    # As PYTHONUNBUFFERED gives a spawned rank: every write reaches the launcher as it is made. The
    # interpreter's own streams (typed Final) are replaced too, so a script that restores them keeps that.
    sys.stdout = sys.__stdout__ = _unbuffered(1, sys.__stdout__)  # type: ignore[misc]
    sys.stderr = sys.__stderr__ = _unbuffered(2, sys.__stderr__)  # type: ignore[misc]
    if (share := gpufleet_share.share_of(env)) is not None:
        gpufleet_share.cap(share)  # torch is imported already: capped before the script's first line
    os._exit(_run(argv, workdir))


def _unbuffered(fd: int, like: IO[str] | None) -> io.TextIOWrapper:

    return io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), encoding=getattr(like, "encoding", None) or "utf-8",
                            errors=getattr(like, "errors", None), line_buffering=True, write_through=True)


# What the script left (its globals, or the exception that ended it, whose frames hold them), kept until the
# rank's os._exit. Freed when the script returns, its objects' destructors would run on this thread while it
# holds the GIL, in a process that is not shutting down: torch's gloo process group, freed with a DDP
# model, joins its worker thread there, and that thread may need the GIL to finish its last work — both
# ranks had trained every step, and one waited on the other for good. An interpreter's own exit does not
# wait so (threads that ask for the GIL then are ended), nor does Python promise destructors at exit.
_KEPT: list[object] = []


def _run(argv: list[str], workdir: str) -> int:
    import atexit
    import runpy
    import traceback

    code = 0
    try:
        if argv[1] == "-m":
            sys.argv = ["-m", *argv[3:]]  # run_module puts the module's file first, as -m does
            sys.path[0] = workdir
            _KEPT.append(runpy.run_module(argv[2], run_name="__main__", alter_sys=True))
        else:
            sys.argv = argv[1:]
            sys.path[0] = os.path.dirname(os.path.join(workdir, argv[1]))
            _KEPT.append(runpy.run_path(argv[1], run_name="__main__"))
    except SystemExit as exc:
        _KEPT.append(exc)  # its traceback holds the script's frames, and so its globals
        code = _exit_status(exc.code)
    except BaseException as exc:  # noqa: BLE001 - as the interpreter: the traceback on stderr, status 1
        _KEPT.append(exc)
        traceback.print_exc()
        code = 1
    try:
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    return code


def _exit_status(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool):
        return value & 0xFF
    print(value, file=sys.stderr)  # sys.exit("message"): the message, status 1
    return 1
