"""scripts/test.sh cleans up the throwaway PostgreSQL and Redis it starts, and lists the slowest tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from servers import free_port

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_test_script_removes_its_services_directory_on_exit():
    if not list(Path("/usr/lib/postgresql").glob("*/bin/initdb")) or shutil.which("redis-server") is None:
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail("PostgreSQL and Redis are needed (.ci/run installs them)")
        pytest.skip("PostgreSQL or Redis is not installed")
    # A copy of the script beside the real services helper. Installing is not
    # what is tested: install.sh here does nothing, and pytest only prints its version.
    root = Path(tempfile.mkdtemp(prefix="gpufleet-testsh-", dir="/tmp"))
    try:
        os.chmod(root, 0o755)  # PostgreSQL runs as the postgres account when we are root
        (root / "scripts").mkdir()
        (root / ".ci").mkdir()
        shutil.copy(REPO / "scripts" / "test.sh", root / "scripts" / "test.sh")
        shutil.copy(REPO / ".ci" / "services.sh", root / ".ci" / "services.sh")
        (root / "scripts" / "install.sh").write_text("exit 0\n")
        (root / ".venv" / "bin").mkdir(parents=True)
        # The venv's python says how it was called, then runs the real one.
        fake = root / ".venv" / "bin" / "python"
        fake.write_text(f'#!/bin/sh\necho "python $*"\nexec {sys.executable} "$@"\n')
        fake.chmod(0o755)
        tmp = root / "tmp"
        tmp.mkdir(mode=0o755)
        os.chmod(tmp, 0o755)
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
        env.update(TMPDIR=str(tmp), GPUFLEET_PG_PORT=str(free_port()), GPUFLEET_REDIS_PORT=str(free_port()))
        out = subprocess.run(["bash", str(root / "scripts" / "test.sh"), "--version"], env=env,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "pytest" in out.stdout + out.stderr
        # The slowest tests are listed, so slow areas are known.
        assert "python -m pytest --durations=25 --version" in out.stdout
        assert not list(tmp.glob("gpufleet-services.*")), "the services directory was left behind"
    finally:
        shutil.rmtree(root, ignore_errors=True)
