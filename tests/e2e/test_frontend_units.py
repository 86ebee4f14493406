"""The dashboard's component and hook tests (Vitest), run from pytest.

So the one test command (pytest) runs them too. They need frontend/node_modules
(`npm ci` in frontend/, or scripts/build-frontend.sh); outside CI the test is
skipped without them, in CI it fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

FRONTEND = Path(__file__).resolve().parents[2] / "frontend"
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def test_vitest_suite_passes() -> None:
    vitest = FRONTEND / "node_modules" / ".bin" / "vitest"
    if not vitest.exists() or shutil.which("node") is None:
        why = "frontend/node_modules is missing: run `npm ci` in frontend/ (needs Node.js 20+)"
        if IN_CI:
            pytest.fail(why)
        pytest.skip(why)
    proc = subprocess.run(
        [str(vitest), "run", "--reporter=dot"],
        cwd=FRONTEND,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "CI": "true", "NO_COLOR": "1"},
    )
    assert proc.returncode == 0, f"vitest failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    assert " passed" in proc.stdout, proc.stdout[-2000:]
