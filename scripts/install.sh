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
.venv/bin/python -c "import torch" 2>/dev/null || .venv/bin/pip install --quiet "torch==2.13.0"
extras=${GPUFLEET_EXTRAS:-}
target="."
[ -n "$extras" ] && target=".[$extras]"
.venv/bin/pip install --quiet -e "$target"
if command -v npm >/dev/null 2>&1; then
  bash scripts/build-frontend.sh
else
  # The API, worker and CLI work without it; / then says how to build it.
  echo "install: npm not found, so the dashboard is not built (install Node.js 20+ and run scripts/build-frontend.sh)" >&2
fi
