"""Build step that puts the dashboard inside the package.

Everything else about the package is in pyproject.toml. Building a wheel (``pip
install .``, ``pip wheel .``, ``python -m build``) runs ``npm ci && npm run build``
in ``frontend/`` first, which writes the dashboard into
``backend/gpufleet/static/``; package-data then ships it. The build stops with
the reason when Node.js is missing or too old.

``GPUFLEET_BUILD_DASHBOARD``:
  unset or ``1``  build it when ``static/index.html`` is absent, else ship what is there
  ``force``       build it even when a build is there
  ``0``           a backend-only wheel: no dashboard (``/`` then says it is absent)

An editable install (``pip install -e .``) never builds it: a checkout builds
it with ``scripts/build-frontend.sh``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import find_namespace_packages, setup
from setuptools.command.build_py import build_py
from setuptools.errors import SetupError

ROOT = Path(__file__).resolve().parent
FRONTEND = ROOT / "frontend"
STATIC = ROOT / "backend" / "gpufleet" / "static"
NODE_MAJOR = 20
SWITCH = "GPUFLEET_BUILD_DASHBOARD"


def _say(line: str) -> None:
    print(f"gpufleet build: {line}", flush=True)


def _node_major() -> int:
    out = subprocess.run(["node", "-p", "process.versions.node.split('.')[0]"],
                         capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


def _check_node() -> None:
    if shutil.which("npm") is None or shutil.which("node") is None:
        raise SetupError(
            f"the dashboard needs Node.js {NODE_MAJOR}+ and npm to build, and npm/node is not on PATH. "
            f"Install Node.js {NODE_MAJOR}+ (https://nodejs.org), or set {SWITCH}=0 for a "
            "backend-only package without the dashboard")
    major = _node_major()
    if major < NODE_MAJOR:
        raise SetupError(f"Node.js {major} is too old for the dashboard (needs {NODE_MAJOR}+); "
                         f"upgrade it, or set {SWITCH}=0 for a backend-only package")


def build_dashboard() -> None:
    """``npm ci && npm run build`` in frontend/, or a SetupError that says why not."""
    if not (FRONTEND / "package.json").is_file():
        raise SetupError(f"no frontend/ sources beside setup.py to build the dashboard from, and no built "
                         f"dashboard in {STATIC}; build from a full checkout, or set {SWITCH}=0")
    _check_node()
    for step in (["npm", "ci", "--no-audit", "--no-fund"], ["npm", "run", "build"]):
        _say(" ".join(step) + " (frontend/)")
        done = subprocess.run(step, cwd=FRONTEND)
        if done.returncode != 0:
            raise SetupError(f"`{' '.join(step)}` in frontend/ failed (exit {done.returncode}); see its "
                             f"output above, or set {SWITCH}=0 for a backend-only package")
    if not (STATIC / "index.html").is_file():
        raise SetupError(f"`npm run build` left no {STATIC / 'index.html'}")


class BuildPyWithDashboard(build_py):
    """build_py that first makes sure the dashboard is built into the package."""

    def run(self) -> None:
        if not getattr(self, "editable_mode", False):
            self._dashboard()
            # package-data globs are read lazily; drop any list made before the build.
            self.__dict__.pop("data_files", None)
        super().run()

    def _dashboard(self) -> None:
        wanted = os.environ.get(SWITCH, "1").strip().lower()
        if wanted in ("0", "no", "false", "off"):
            _say(f"{SWITCH}=0: a backend-only package, without the dashboard")
            return
        if wanted != "force" and (STATIC / "index.html").is_file():
            _say(f"shipping the dashboard already built in {STATIC} ({SWITCH}=force rebuilds it)")
            return
        build_dashboard()


# The migrations live at the checkout's top (alembic/, beside alembic.ini) and ship inside the
# package as gpufleet.db.migrations, so `alembic upgrade head` in a checkout and `gpufleet db
# upgrade` from a wheel run the same files.
MIGRATIONS = {"gpufleet.db.migrations": "alembic", "gpufleet.db.migrations.versions": "alembic/versions"}

setup(
    cmdclass={"build_py": BuildPyWithDashboard},
    package_dir={"": "backend", **MIGRATIONS},
    # Namespace packages too (as [tool.setuptools.packages.find] did): sweeps/ has no __init__.py.
    packages=[*find_namespace_packages("backend", include=["gpufleet", "gpufleet.*"]), *MIGRATIONS],
)
