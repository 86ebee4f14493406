"""scripts/install.sh's stamp: start.sh (the sessions extra) and test.sh (the test extra) share one install.

The script runs for real in a folder of its own; what it calls is this environment's interpreter (a
wrapper at ``.venv/bin/python`` that imports the folder's gpufleet) and a ``pip`` that writes down what
it was asked to install, so what is measured is when the script decides to run pip, and with what.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _install_copy() -> Path:
    root = Path(tempfile.mkdtemp(prefix="gpufleet-install-", dir="/tmp"))
    root.chmod(0o755)
    (root / "scripts").mkdir()
    (root / "scripts" / "install.sh").write_bytes((REPO / "scripts" / "install.sh").read_bytes())
    (root / "scripts" / "build-frontend.sh").write_text("exit 0\n")  # the dashboard is not what is tested
    (root / "pyproject.toml").write_bytes((REPO / "pyproject.toml").read_bytes())
    (root / "backend" / "gpufleet").mkdir(parents=True)
    (root / "backend" / "gpufleet" / "__init__.py").write_text("")
    venv = root / ".venv" / "bin"
    venv.mkdir(parents=True)
    python = venv / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{root}/backend" exec "{sys.executable}" "$@"\n')
    pip = venv / "pip"
    pip.write_text(f'#!/bin/sh\necho "$@" >> "{root}/pip.log"\n')
    for f in (python, pip):
        f.chmod(0o755)
    return root


def _install(root: Path, extras: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    env["PYTHON"] = sys.executable
    if extras is not None:
        env["GPUFLEET_EXTRAS"] = extras
    done = subprocess.run(["bash", "scripts/install.sh"], cwd=root, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_tests_and_a_start_take_turns_without_undoing_each_others_install() -> None:
    root = _install_copy()
    try:
        _take_turns(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _take_turns(root: Path) -> None:
    log = root / "pip.log"
    assert "installing gpufleet" in _install(root, "test")  # test.sh, the first time
    assert "installing gpufleet" in _install(root, None)  # start.sh adds the sessions extra, once
    for _ in range(2):
        assert "pip skipped" in _install(root, "test")
        assert "pip skipped" in _install(root, None)
    assert log.read_text().splitlines() == ["install --quiet -e .[test]", "install --quiet -e .[sessions,test]"]
    # A changed pyproject.toml installs again, keeping both extras.
    (root / "pyproject.toml").write_text((root / "pyproject.toml").read_text() + "\n# changed\n")
    assert "installing gpufleet" in _install(root, None)
    assert log.read_text().splitlines()[-1] == "install --quiet -e .[sessions,test]"
