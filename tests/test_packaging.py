"""The package as pip builds it: migrations inside, the dashboard built by the
wheel's build step or a clear refusal. (CI's .ci/clean-install.sh builds the
full wheel from a clean clone and serves it.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SKIP = shutil.ignore_patterns(".git", ".venv", "node_modules", "static", "build", "dist", "*.egg-info",
                              "__pycache__", "tests", "test-artifacts", ".gpufleet")


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """The checkout's files as a clean clone has them: no built dashboard, no node_modules."""
    tree = tmp_path / "src"
    shutil.copytree(ROOT, tree, ignore=SKIP)
    return tree


def _wheel(source: Path, out: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "-w", str(out), str(source)],
        env={**os.environ, **env}, capture_output=True, text=True, timeout=300)


def test_backend_only_wheel_has_the_migrations_and_no_dashboard(source: Path, tmp_path: Path) -> None:
    done = _wheel(source, tmp_path / "wheel", GPUFLEET_BUILD_DASHBOARD="0")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "a backend-only package, without the dashboard" in done.stdout + done.stderr
    (wheel,) = (tmp_path / "wheel").glob("gpufleet-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    # The checkout's top-level alembic/ is the package's gpufleet/db/migrations.
    versions = {p.name for p in (ROOT / "alembic/versions").glob("*.py")}
    assert len(versions) >= 14
    assert {f"gpufleet/db/migrations/versions/{v}" for v in versions} <= names
    assert {"gpufleet/db/migrations/env.py", "gpufleet/db/migrations/script.py.mako"} <= names
    # Folders that are not packages, read at run time: every .py file of the source is in the wheel.
    sources = {f"gpufleet/{p.relative_to(ROOT / 'backend/gpufleet')}" for p in (ROOT / "backend/gpufleet").rglob("*.py")
               if "__pycache__" not in p.parts}
    assert sources <= names, sorted(sources - names)
    assert not [n for n in names if n.startswith("gpufleet/static/")]
    assert not [n for n in names if "__pycache__" in n]


def test_wheel_without_node_fails_saying_why(source: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "python").symlink_to(sys.executable)
    done = _wheel(source, tmp_path / "wheel", PATH=str(bare))
    assert done.returncode != 0
    said = done.stdout + done.stderr
    assert "needs Node.js 20+ and npm" in said and "GPUFLEET_BUILD_DASHBOARD=0" in said
    assert not list((tmp_path / "wheel").glob("*.whl"))


def test_a_checkout_runs_the_top_level_alembic_folder() -> None:
    from gpufleet.db import session

    # An editable install (this test's) reads the checkout's alembic/, as alembic.ini does.
    assert session.ALEMBIC_DIR == ROOT / "alembic"
    assert "script_location = %(here)s/alembic" in (ROOT / "alembic.ini").read_text()
    assert session.head_revision() is not None
