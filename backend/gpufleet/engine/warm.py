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

A member's warm launcher runs in that member's sandbox, made before any
training of theirs was known: the worker binds the training's directories
into that sandbox's slots once it hands the training over, so they are at
their own paths here too (``jobs/slots.py``), and nothing else of the data
dir is.
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


def main(argv: list[str] | None = None, launchers: Mapping[str, Callable[[str, bool], int]] | None = None) -> int:
    """``launchers``: what this process can become besides a recipe's launcher, by module name; each is
    called with the training's spec and whether the rank server runs (``trainings/warm_launch.py``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 2 or argv[0] != "--parent-fd" or not argv[1].isdigit():
        print("usage: python -m gpufleet.trainings.warm_launch --parent-fd N", file=sys.stderr)
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
