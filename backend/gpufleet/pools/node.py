"""``python -m gpufleet.pools.node KIND SPEC.json``: one Slurm task starts gpufleet's launcher on its node.

Runs on the cluster's node, as the member (Slurm's doing). The spec names as
many GPUs as the job asked for on each node; which ones is Slurm's grant, read
from the environment it sets (``CUDA_VISIBLE_DEVICES``, from the job's GRES). A
node without an NVIDIA driver (no ``/dev/nvidiactl``: a simulated cluster) runs
the ranks on the CPU with the GPU mapping kept, as a simulated fleet's host
does. A training over several nodes, a recipe or a script, takes its
rendezvous from Slurm too: this task's number (``SLURM_PROCID``) gives its
node's rank and its first rank, the batch host (``SLURM_LAUNCH_NODE_IPADDR``,
where task 0 runs) holds the store, on a port derived from the job's id. Then the kind's launcher replaces this process, so
Slurm's signals reach it directly. Torch-free.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

from gpufleet.engine.spec import LaunchSpec
from gpufleet.trainings.script_launch import ScriptSpec, stop_file

# The store's port: one per job, below Linux's ephemeral range so no outgoing connection holds it.
STORE_PORT_BASE, STORE_PORT_SPAN = 20000, 10000


def granted(environ: Mapping[str, str], count: int) -> list[int]:
    """The GPUs Slurm gave this task, as device indexes."""
    visible = [v.strip() for v in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if all(v.isdigit() for v in visible) and len(visible) >= count:
        return [int(v) for v in visible[:count]]
    return list(range(count))


def rendezvous(environ: Mapping[str, str]) -> tuple[int, str, int]:
    """This task's number, and the address and port every task's ranks meet at, from the job's environment."""
    task = int(environ.get("SLURM_PROCID", "0"))
    job = int(environ.get("SLURM_JOB_ID", "0") or 0)
    return task, environ.get("SLURM_LAUNCH_NODE_IPADDR") or "127.0.0.1", STORE_PORT_BASE + job % STORE_PORT_SPAN


def task_gang(gang: dict, per_task: int, environ: Mapping[str, str]) -> dict:
    """A multi-node recipe's rendezvous, for this task, from the job's environment."""
    task, addr, port = rendezvous(environ)
    return {**gang, "first_rank": task * per_task, "store_master": task == 0, "master_addr": addr,
            "master_port": port}


def task_file(path: str, environ: Mapping[str, str]) -> str:
    """Task 0 writes the attempt's progress file (the one gpufleet reads); each other task a file of its own."""
    task = int(environ.get("SLURM_PROCID", "0"))
    return path if task == 0 else str(Path(path).with_suffix(f".task{task}.jsonl"))


def _where(environ: Mapping[str, str]) -> str:
    return (f"Slurm job {environ.get('SLURM_JOB_ID', 'local')} on {environ.get('SLURMD_NODENAME', '?')}"
            + (f" (task {environ['SLURM_PROCID']} of {environ['SLURM_NTASKS']})"
               if int(environ.get("SLURM_NTASKS", "1") or 1) > 1 else ""))


def recipe(spec_path: Path, environ: Mapping[str, str], on_cpu: bool) -> tuple[str, Path]:
    spec = LaunchSpec.read(spec_path)
    devices = [f"cuda:{i}" for i in granted(environ, len(spec.devices))]
    here = replace(spec, devices=devices, ranks_on_cpu=on_cpu,
                   gang=task_gang(spec.gang, len(devices), environ) if spec.gang else None,
                   progress_file=task_file(spec.progress_file, environ))
    ranks = (f"ranks {here.gang['first_rank']}-{here.gang['first_rank'] + len(devices) - 1} of "
             f"{here.gang['world_size']} " if here.gang else "ranks ")
    print(f"[gpufleet] {_where(environ)}: {ranks}on {', '.join(devices)}"
          f"{' (CPU: no NVIDIA driver on this node)' if on_cpu else ''}", flush=True)
    return "gpufleet.engine.launch", here.write(_own_copy(spec_path, environ))


def script(spec_path: Path, environ: Mapping[str, str], on_cpu: bool) -> tuple[str, Path]:
    spec = ScriptSpec.read(spec_path)
    here = replace(spec, gpu_indexes=granted(environ, spec.local_world), ranks_on_cpu=on_cpu)
    ranks = f"the script's {spec.world_size} rank(s)"
    if spec.nnodes > 1:
        task, addr, port = rendezvous(environ)
        # One stop file and one report folder for every node; task 0's progress file is the attempt's.
        here = replace(here, node_rank=task, first_rank=task * spec.local_world, master_addr=addr, master_port=port,
                       stop_file=stop_file(spec), report_file=spec.report_file or spec.progress_file + ".report",
                       progress_file=task_file(spec.progress_file, environ))
        ranks = (f"node {task} of {spec.nnodes}: ranks {here.first_rank}-{here.first_rank + spec.local_world - 1} "
                 f"of {spec.world_size}, meeting at {addr}:{port},")
    print(f"[gpufleet] {_where(environ)}: {ranks} on GPU(s) "
          f"{', '.join(map(str, here.gpu_indexes))}{' (CPU: no NVIDIA driver on this node)' if on_cpu else ''}",
          flush=True)
    path = _own_copy(spec_path, environ)
    here.write(path)
    return "gpufleet.trainings.script_launch", path


STARTS: dict[str, Callable[[Path, Mapping[str, str], bool], tuple[str, Path]]] = {
    "recipe": recipe, "script": script}


def _own_copy(spec_path: Path, environ: Mapping[str, str]) -> Path:
    job, task = environ.get("SLURM_JOB_ID", "local"), environ.get("SLURM_PROCID", "0")
    return spec_path.with_name(f"{spec_path.stem}-job{job}-task{task}.json")


def main(argv: list[str]) -> int:
    if len(argv) == 1:  # a job submitted before scripts ran on pools
        argv = ["recipe", *argv]
    if len(argv) != 2 or argv[0] not in STARTS:
        print(f"usage: python -m gpufleet.pools.node {{{','.join(STARTS)}}} SPEC.json", file=sys.stderr)
        return 2
    on_cpu = not Path("/dev/nvidiactl").exists()
    slurms = {name: os.environ[name] for name in os.environ if name.startswith(("SLURM", "CUDA_VISIBLE"))}
    module, path = STARTS[argv[0]](Path(argv[1]), slurms, on_cpu)
    os.environ["GPUFLEET_TRAINING_ID"] = path.parent.name
    os.execv(sys.executable, [sys.executable, "-m", module, str(path)])
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
