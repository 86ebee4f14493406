#!/usr/bin/env bash
# Install gpufleet into .venv (and build the dashboard). Safe to run again.
# Installs the `sessions` extra (JupyterLab and a Python kernel, for notebook sessions) by default;
#   GPUFLEET_EXTRAS=test  the test tools instead (they include JupyterLab);
#   GPUFLEET_EXTRAS=      no extra at all.
# Each step says what it does first: the first install downloads about 1 GB and takes minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
say() { echo "install: $*"; }
# A long step prints a line every 30 s, so a quiet pip never looks like a hang.
ticking() {
  local what=$1 began=$SECONDS next=30; shift
  "$@" & local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    if (( SECONDS - began >= next )) && kill -0 "$pid" 2>/dev/null; then
      say "still $what ($((SECONDS - began)) s)"
      next=$((next + 30))
    fi
  done
  wait "$pid"
}
if [ ! -x .venv/bin/python ]; then
  say "creating the virtual environment .venv with $("$py" -V 2>&1)"
  "$py" -m venv .venv
fi
# torch first, pinned to the build this install takes when none is there; a
# torch already installed (a GPU host's CUDA build, README "GPU hosts") is kept,
# since pyproject.toml asks only for a range (torch>=2.4).
# (find_spec, not import: importing torch alone takes seconds on every start.)
if .venv/bin/python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)"; then
  say "torch is already installed in .venv (kept)"
else
  say "installing torch 2.13.0 into .venv (about 1 GB to download the first time: a few minutes)"
  ticking "installing torch" .venv/bin/pip install --quiet "torch==2.13.0"
fi
extras=${GPUFLEET_EXTRAS-sessions}
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
  say "installing gpufleet and its dependencies into .venv (${extras:+extras: $extras; }a minute or two the first time)"
  ticking "installing gpufleet" .venv/bin/pip install --quiet -e "$target"
  echo "$key" > "$stamp"
fi
if command -v npm >/dev/null 2>&1; then
  say "building the dashboard (skipped when frontend/ is unchanged)"
  bash scripts/build-frontend.sh
else
  # The API, worker and CLI work without it; / then says how to build it.
  echo "install: npm not found, so the dashboard is not built (install Node.js 20+ and run scripts/build-frontend.sh)" >&2
fi
