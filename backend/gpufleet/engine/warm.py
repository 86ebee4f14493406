"""A launcher that has already imported torch (started as ``python -m gpufleet.trainings.warm_launch --parent-fd N``).

A worker keeps a few of these ready (``gpufleet.jobs.warmpool``). Each one
imports torch, the trainer and every installed recipe, then says ``ready`` on
its stdout and waits for one line on stdin: the JSON ``{"spec": PATH, "env":
{...}, "module": LAUNCHER}`` of the training it is to run. It then takes that
environment as its own and runs the launcher (``gpufleet.engine.launch``, a
recipe's, or ``gpufleet.trainings.script_launch``, a script's) in this same
process, so the training's rank (or its launcher, for several ranks) skips the
imports. The process started is ``python -m gpufleet.trainings.warm_launch``,
which gives this one the script launcher to become; a script's ranks fork
from the rank server below where they would have run in this interpreter
(``trainings/script_warm.py``).

CUDA is never initialised before the training's devices are known: nothing
here calls into ``torch.cuda`` (importing torch does not initialise it; the
CUDA runtime reads ``CUDA_VISIBLE_DEVICES`` only when it initialises), and
this process checks ``torch.cuda.is_initialized()`` both after the imports
and again after taking the training's environment: if it ever were, it
refuses the training (exit code ``LAUNCHER_ERROR``) and the pool replaces it,
rather than run ranks on GPUs chosen before the spec was read.

The process is one use: it becomes the training's launcher and exits with it.

Its ranks start warm too. Before saying ``ready`` it starts a rank server
(multiprocessing's forkserver) that imports the same (``engine/rankpreload``)
and answers one fork, so that a training of several ranks forks them from it
instead of spawning interpreters that import torch again. The rank server is
this process's child, in the same sandbox and account, with the same
allow-listed environment and no CUDA; a forked rank takes the training's
environment from the launcher before anything reads it (``engine/launch``),
and the server exits when this process does.

A member's warm launcher runs in that member's sandbox (``--dirs-fd N``),
made before any training of theirs was known, so the training's own
directories are not bound in it. The worker passes them as open
descriptors over the socket N with the job, and this process reaches them
as ``/proc/<its pid>/fd/<fd>`` (which its ranks, children of the same
account in the same PID namespace, can reach too): the spec is read
through them and a copy of it, with those paths in place of the
directories', is what the launcher runs. Nothing else of the data dir
becomes visible.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from gpufleet.engine import exitcodes, rankenv, rankserver
from gpufleet.engine.lifeline import watch_parent
from gpufleet.engine.preload import cuda_initialised, preload

__all__ = ["READY", "cuda_initialised", "main", "preload"]

READY = "gpufleet-warm ready"
# The launchers a warm process can become: a recipe's (the default) and a script's.
RECIPE_MODULE = "gpufleet.engine.launch"
SCRIPT_MODULE = "gpufleet.trainings.script_launch"
MODULES = (RECIPE_MODULE, SCRIPT_MODULE)


def _take_job(line: str) -> dict[str, Any]:
    job = json.loads(line)
    if not isinstance(job, dict) or not isinstance(job.get("spec"), str) or not isinstance(job.get("env"), dict):
        raise ValueError("a job is {\"spec\": PATH, \"env\": {...}, \"module\": LAUNCHER}")
    if job.get("module", RECIPE_MODULE) not in MODULES:
        raise ValueError(f"a job's module is one of {', '.join(MODULES)}")
    return job


def _through_fds(job: dict[str, Any], dirs_fd: int) -> dict[str, Any]:
    """The job with its directories (passed as descriptors on ``dirs_fd``) reached through /proc."""
    import socket

    dirs = job.get("dirs") or []
    if not isinstance(dirs, list) or not all(isinstance(d, str) and os.path.isabs(d) for d in dirs):
        raise ValueError("a job's dirs are absolute paths")
    with socket.socket(fileno=dirs_fd) as sock:
        _, fds, _, _ = socket.recv_fds(sock, 64, len(dirs))
    if len(fds) != len(dirs):
        raise ValueError(f"{len(dirs)} directories named, {len(fds)} descriptors received")
    here = {d.rstrip("/"): f"/proc/{os.getpid()}/fd/{fd}" for d, fd in zip(dirs, fds, strict=True)}

    def moved(value: Any) -> Any:
        if isinstance(value, str):
            for d, p in here.items():
                if value == d or value.startswith(d + "/"):
                    return p + value[len(d):]
            return value
        if isinstance(value, list):
            return [moved(v) for v in value]
        if isinstance(value, dict):
            return {k: moved(v) for k, v in value.items()}
        return value

    with open(moved(job["spec"])) as fh:
        spec = moved(json.load(fh))
    path = os.path.join("/tmp", f"gpufleet-spec-{os.getpid()}.json")  # the sandbox's own /tmp
    with open(path, "w") as fh:
        json.dump(spec, fh)
    return dict(job, spec=path, env=moved(job["env"]))


def main(argv: list[str] | None = None, launchers: Mapping[str, Callable[[str, bool], int]] | None = None) -> int:
    """``launchers``: what this process can become besides a recipe's launcher, by module name; each is
    called with the training's spec and whether the rank server runs (``trainings/warm_launch.py``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    dirs_fd = None
    if len(argv) == 4 and argv[2] == "--dirs-fd" and argv[3].isdigit():
        dirs_fd, argv = int(argv[3]), argv[:2]
    if len(argv) != 2 or argv[0] != "--parent-fd" or not argv[1].isdigit():
        print("usage: python -m gpufleet.trainings.warm_launch --parent-fd N [--dirs-fd M]", file=sys.stderr)
        return exitcodes.LAUNCHER_ERROR
    watch_parent(int(argv[1]))
    preload()
    if cuda_initialised():
        print("gpufleet warm: CUDA was initialised by the imports; this process cannot serve", file=sys.stderr)
        return exitcodes.LAUNCHER_ERROR
    no_server = rankserver.try_start()
    if no_server is None:
        from gpufleet.engine.launch import use_rank_server

        use_rank_server()
    print(READY, flush=True)
    if no_server:  # after READY, the pool's first line: this goes to the log of the training it takes
        print(f"gpufleet warm: no rank server ({no_server}); ranks are spawned", file=sys.stderr, flush=True)
    line = sys.stdin.readline()
    if not line:
        return 0  # the pool closed: nothing to run
    job = _take_job(line)
    if dirs_fd is not None:
        job = _through_fds(job, dirs_fd)
    # As a cold launcher: no input, and exactly the environment the worker gave this training.
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.environ.clear()
    os.environ.update({str(k): str(v) for k, v in job["env"].items()})
    # The ranks count their launcher's start-up from now, not from this process's start in the pool.
    os.environ[rankenv.LAUNCH_BEGAN_ENV] = repr(time.time())
    if cuda_initialised():
        print("gpufleet warm: CUDA is initialised; refusing the training", file=sys.stderr)
        return exitcodes.LAUNCHER_ERROR
    module = job.get("module", RECIPE_MODULE)
    become = (launchers or {}).get(module)
    if become is not None:
        return become(job["spec"], no_server is None)
    if module != RECIPE_MODULE:
        print(f"gpufleet warm: this warm launcher cannot become {module}", file=sys.stderr)
        return exitcodes.LAUNCHER_ERROR
    from gpufleet.engine.launch import main as launch_main

    return launch_main([job["spec"]])
