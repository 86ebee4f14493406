"""A real Slurm cluster for the tests: munged, slurmctld and slurmd started as root by .ci/slurm.sh.

Two nodes (``sim1``, ``sim2``: two slurmd on this machine, each on a port of
its own) with two GPUs each declared as GRES (device files made with mknod; the
ranks run on gpufleet's simulated GPUs, on the CPU). Started once per test
session, in a few seconds, and stopped at its end.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / ".ci" / "slurm.sh"
PARTITION = "gpu"
NODES = ("sim1", "sim2")


def slurm(*argv: str) -> str:
    """A Slurm client command against the test cluster (``SLURM_CONF`` is set while it runs)."""
    return subprocess.run(list(argv), check=True, capture_output=True, text=True, timeout=30).stdout


def _closed_ancestor(path: Path) -> tuple[Path, Path] | None:
    """The first folder above ``path`` that other accounts may not enter, and its child on the way."""
    parts = path.resolve().parents
    for child, parent in zip([path.resolve(), *parts], parts):
        if parent != Path("/") and not parent.stat().st_mode & 0o001:
            return parent, child
    return None


def shadow_for_jobs() -> dict[str, str]:
    """Where this interpreter sits under a folder other accounts may not enter (pyenv under /root), the
    ``SLURM_SIM_SHADOW`` that lets the jobs' accounts reach it (.ci/slurm.sh); else nothing."""
    closed = {c for c in (_closed_ancestor(Path(sys.base_prefix)), _closed_ancestor(Path(sys.prefix))) if c}
    if not closed:
        return {}
    if len(closed) > 1:
        pytest.fail(f"the interpreter and its venv sit under two closed folders {sorted(closed)}: "
                    "run the tests from a checkout other accounts may enter")
    [(folder, child)] = closed
    return {"SLURM_SIM_SHADOW": f"{folder}:{child}"}


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.fail("the Slurm tests start slurmctld and slurmd as root; run the suite as root (CI does)")
    home = Path(tempfile.mkdtemp(prefix="gpufleet-slurm-"))
    home.chmod(0o755)
    env = {**os.environ, **shadow_for_jobs(), "SLURM_SIM_NODES": str(len(NODES))}
    done = subprocess.run(["bash", str(SCRIPT), "start", str(home)], capture_output=True, text=True, timeout=120,
                          env=env, check=False)
    if done.returncode != 0:
        pytest.fail(f"the test Slurm cluster did not start: {done.stderr}")
    before = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(home / "slurm.conf")
    try:
        yield home
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", str(home)], capture_output=True, timeout=60, check=False)
        if before is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = before
