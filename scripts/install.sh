#!/usr/bin/env bash
# Install gpufleet into .venv (and build the dashboard). Safe to run again.
#   GPUFLEET_EXTRAS=test  also installs the test tools.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$py" -m venv .venv
fi
# torch first, pinned to the build this install takes when none is there; a
# torch already installed (a GPU host's CUDA build, README "GPU hosts") is kept,
# since pyproject.toml asks only for a range (torch>=2.4).
# (find_spec, not import: importing torch alone takes seconds on every start.)
.venv/bin/python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)" \
  || .venv/bin/pip install --quiet "torch==2.13.0"
extras=${GPUFLEET_EXTRAS:-}
target="."
[ -n "$extras" ] && target=".[$extras]"
# A second run skips pip when nothing it reads changed: the stamp holds the hash
# of pyproject.toml, the extras and the interpreter, and gpufleet must be this
# checkout's (an editable install picks up code changes without pip).
stamp=.venv/.gpufleet-install
key="$(cat pyproject.toml | sha256sum | cut -c1-64) extras=$extras $(.venv/bin/python -V 2>&1)"
here="$PWD/backend/gpufleet/__init__.py"
if [ "$(cat "$stamp" 2>/dev/null)" = "$key" ] && \
   [ "$(.venv/bin/python -c 'import gpufleet; print(gpufleet.__file__)' 2>/dev/null)" = "$here" ]; then
  echo "install: gpufleet in .venv is up to date (pyproject.toml unchanged; pip skipped)"
else
  .venv/bin/pip install --quiet -e "$target"
  echo "$key" > "$stamp"
fi
if command -v npm >/dev/null 2>&1; then
  bash scripts/build-frontend.sh
else
  # The API, worker and CLI work without it; / then says how to build it.
  echo "install: npm not found, so the dashboard is not built (install Node.js 20+ and run scripts/build-frontend.sh)" >&2
fi
