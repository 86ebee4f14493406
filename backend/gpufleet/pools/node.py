"""``python -m gpufleet.pools.node [--side SIDE] KIND SPEC.json``: one task of a pool's job starts gpufleet's
launcher on its node.

Runs on the pool's node, as the member (its scheduler's doing). The spec names
as many GPUs as the job asked for on each node; which ones is the scheduler's
grant, read from the environment it sets (CUDA's visibility variable: GPU
indexes, or a MIG instance's UUID, which a recipe's ranks take as they are). A node
without an NVIDIA driver (no ``/dev/nvidiactl``: a simulated cluster) runs the
ranks on the CPU with the GPU mapping kept, as a simulated fleet's host does.
A training over several nodes, a recipe or a script, takes its rendezvous from
the job too: this task's number gives its node's rank and its first rank, task
0's host holds the store, on a port derived from the job's id. Where those
come from is the place's *side* (:data:`SIDES`, named by the kind of place,
``gpufleet.pools.place.PlaceKind.node_side``): Slurm's ``SLURM_*``, or
gpufleet's own ``GPUFLEET_NODE_*`` that any other scheduler can set. Then the
kind's launcher replaces this process, so the scheduler's signals reach it
directly. Torch-free.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from gpufleet.devices.device import DEVICE_ENV, DeviceSet
from gpufleet.engine.spec import LaunchSpec
from gpufleet.trainings.script_launch import ScriptSpec, stop_file


@dataclass(frozen=True)
class Task:
    """This task of the job, as the place's environment describes it."""

    job: str  # the job's id ("local" when none was given)
    task: int  # this task's number, 0 on the node that holds the store
    tasks: int  # how many tasks (nodes) the job has
    master: str  # the address of task 0's node
    node: str  # this node's name
    what: str  # "Slurm job" in "Slurm job 42 on sim1"


def slurm_side(environ: Mapping[str, str]) -> Task:
    return Task(environ.get("SLURM_JOB_ID") or "local", int(environ.get("SLURM_PROCID", "0") or 0),
                int(environ.get("SLURM_NTASKS", "1") or 1), environ.get("SLURM_LAUNCH_NODE_IPADDR") or "127.0.0.1",
                environ.get("SLURMD_NODENAME", "?"), "Slurm job")


def env_side(environ: Mapping[str, str]) -> Task:
    return Task(environ.get("GPUFLEET_NODE_JOB") or "local", int(environ.get("GPUFLEET_NODE_TASK", "0") or 0),
                int(environ.get("GPUFLEET_NODE_TASKS", "1") or 1), environ.get("GPUFLEET_NODE_MASTER") or "127.0.0.1",
                environ.get("GPUFLEET_NODE_NAME", "?"), "job")


# How each kind of place tells a task where it is; the variables each reads are handed on below.
SIDES: dict[str, tuple[tuple[str, ...], Callable[[Mapping[str, str]], Task]]] = {
    "slurm": (("SLURM",), slurm_side), "env": (("GPUFLEET_NODE_",), env_side)}

# The store's port: one per job, below Linux's ephemeral range so no outgoing connection holds it.
STORE_PORT_BASE, STORE_PORT_SPAN = 20000, 10000


def granted(environ: Mapping[str, str], count: int) -> DeviceSet:
    """The GPUs Slurm gave this task (the first ``count`` of the node's when it names fewer, or none)."""
    try:
        given = DeviceSet.from_env(environ, "cuda")
    except ValueError:  # not a list of indexes or UUIDs: the node's own numbering
        given = None
    if given is not None and len(given) >= count:
        return DeviceSet("cuda", given.devices[:count])
    return DeviceSet.of("cuda", range(count))


def rendezvous(task: Task) -> tuple[int, str, int]:
    """This task's number, and the address and port every task's ranks meet at, from the job's environment."""
    job = int(task.job) if task.job.isdigit() else 0
    return task.task, task.master, STORE_PORT_BASE + job % STORE_PORT_SPAN


def task_gang(gang: dict, per_task: int, task: Task) -> dict:
    """A multi-node recipe's rendezvous, for this task, from the job's environment."""
    number, addr, port = rendezvous(task)
    return {**gang, "first_rank": number * per_task, "store_master": number == 0, "master_addr": addr,
            "master_port": port}


def task_file(path: str, task: Task) -> str:
    """Task 0 writes the attempt's progress file (the one gpufleet reads); each other task a file of its own."""
    return path if task.task == 0 else str(Path(path).with_suffix(f".task{task.task}.jsonl"))


def _where(task: Task) -> str:
    return (f"{task.what} {task.job} on {task.node}"
            + (f" (task {task.task} of {task.tasks})" if task.tasks > 1 else ""))


def recipe(spec_path: Path, environ: Mapping[str, str], task: Task, on_cpu: bool) -> tuple[str, Path]:
    spec = LaunchSpec.read(spec_path)
    devices = granted(environ, len(spec.devices)).labels
    here = replace(spec, devices=devices, ranks_on_cpu=on_cpu,
                   gang=task_gang(spec.gang, len(devices), task) if spec.gang else None,
                   progress_file=task_file(spec.progress_file, task))
    ranks = (f"ranks {here.gang['first_rank']}-{here.gang['first_rank'] + len(devices) - 1} of "
             f"{here.gang['world_size']} " if here.gang else "ranks ")
    print(f"[gpufleet] {_where(task)}: {ranks}on {', '.join(devices)}"
          f"{' (CPU: no NVIDIA driver on this node)' if on_cpu else ''}", flush=True)
    return "gpufleet.engine.launch", here.write(_own_copy(spec_path, task))


def script(spec_path: Path, environ: Mapping[str, str], task: Task, on_cpu: bool) -> tuple[str, Path]:
    spec = ScriptSpec.read(spec_path)
    try:
        indexes = granted(environ, spec.local_world).indexes
    except ValueError:  # MIG instances: a script's ranks are given GPUs by index
        indexes = list(range(spec.local_world))
    here = replace(spec, gpu_indexes=indexes, ranks_on_cpu=on_cpu)
    ranks = f"the script's {spec.world_size} rank(s)"
    if spec.nnodes > 1:
        number, addr, port = rendezvous(task)
        # One stop file and one report folder for every node; task 0's progress file is the attempt's.
        here = replace(here, node_rank=number, first_rank=number * spec.local_world, master_addr=addr,
                       master_port=port, stop_file=stop_file(spec),
                       report_file=spec.report_file or spec.progress_file + ".report",
                       progress_file=task_file(spec.progress_file, task))
        ranks = (f"node {number} of {spec.nnodes}: ranks {here.first_rank}-{here.first_rank + spec.local_world - 1} "
                 f"of {spec.world_size}, meeting at {addr}:{port},")
    print(f"[gpufleet] {_where(task)}: {ranks} on GPU(s) "
          f"{here.devices().display(', ')}{' (CPU: no NVIDIA driver on this node)' if on_cpu else ''}",
          flush=True)
    path = _own_copy(spec_path, task)
    here.write(path)
    return "gpufleet.trainings.script_launch", path


STARTS: dict[str, Callable[[Path, Mapping[str, str], Task, bool], tuple[str, Path]]] = {
    "recipe": recipe, "script": script}


def _own_copy(spec_path: Path, task: Task) -> Path:
    return spec_path.with_name(f"{spec_path.stem}-job{task.job}-task{task.task}.json")


def main(argv: list[str]) -> int:
    side = "slurm"  # a job submitted before the side was named is a Slurm job
    if len(argv) >= 2 and argv[0] == "--side":
        side, argv = argv[1], argv[2:]
    if len(argv) == 1:  # a job submitted before scripts ran on pools
        argv = ["recipe", *argv]
    if len(argv) != 2 or argv[0] not in STARTS or side not in SIDES:
        print(f"usage: python -m gpufleet.pools.node [--side {{{','.join(SIDES)}}}] {{{','.join(STARTS)}}} SPEC.json",
              file=sys.stderr)
        return 2
    on_cpu = not Path("/dev/nvidiactl").exists()
    prefixes, read = SIDES[side]
    given = {name: os.environ[name] for name in os.environ if name.startswith(prefixes) or name in DEVICE_ENV}
    module, path = STARTS[argv[0]](Path(argv[1]), given, read(given), on_cpu)
    os.environ["GPUFLEET_TRAINING_ID"] = path.parent.name
    os.execv(sys.executable, [sys.executable, "-m", module, str(path)])
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
