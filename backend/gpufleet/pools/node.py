"""``python -m gpufleet.pools.node SPEC.json``: one Slurm task starts gpufleet's launcher on its node.

Runs on the cluster's node, as the member (Slurm's doing). The spec names as
many GPUs as the job asked for; which ones is Slurm's grant, read from the
environment it sets (``CUDA_VISIBLE_DEVICES``, from the job's GRES). A node
without an NVIDIA driver (no ``/dev/nvidiactl``: a simulated cluster) runs the
ranks on the CPU with the GPU mapping kept, as a simulated fleet's host does.
Then the launcher replaces this process, so Slurm's signals reach it directly.
Torch-free.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

from gpufleet.training.spec import LaunchSpec


def granted(environ: dict[str, str], count: int) -> list[str]:
    """The GPUs Slurm gave this task, as launcher devices."""
    visible = [v.strip() for v in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if all(v.isdigit() for v in visible) and len(visible) >= count:
        return [f"cuda:{v}" for v in visible[:count]]
    return [f"cuda:{i}" for i in range(count)]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m gpufleet.pools.node SPEC.json", file=sys.stderr)
        return 2
    spec = LaunchSpec.read(argv[0])
    job = os.environ.get("SLURM_JOB_ID", "local")
    on_cpu = not Path("/dev/nvidiactl").exists()
    here = replace(spec, devices=granted(dict(os.environ), len(spec.devices)), ranks_on_cpu=on_cpu)
    path = here.write(Path(argv[0]).with_name(f"spec-{spec.attempt}-job{job}.json"))
    print(f"[gpufleet] Slurm job {job} on {os.environ.get('SLURMD_NODENAME', '?')}: ranks on "
          f"{', '.join(here.devices)}{' (CPU: no NVIDIA driver on this node)' if on_cpu else ''}", flush=True)
    os.execv(sys.executable, [sys.executable, "-m", "gpufleet.training.launch", str(path)])
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
