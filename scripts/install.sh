#!/usr/bin/env bash
# Install gpufleet into .venv (and build the dashboard). Safe to run again.
# Installs the `sessions` extra (JupyterLab and a Python kernel, for notebook sessions) by default;
#   GPUFLEET_EXTRAS=test  the test tools (they include JupyterLab);
#   GPUFLEET_EXTRAS=      no extra.
# The extras a run asks for are added to those installed before, never taken away (start.sh and test.sh
# share one .venv).
# Each step says what it does first: the first install downloads about 1 GB and takes minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
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
# The venv's interpreter is every teammate's too: the CLI they run is .venv/bin/gpufleet, and a Slurm pool's
# jobs run the server's interpreter as the member. So it is one that another account can execute (pyenv's
# under /root, mode 0700, is not): PYTHON if set, else the first Python 3.11+ of python3, /usr/bin/python3,
# /usr/local/bin/python3 that another account can run, else python3 (start.sh then says what to fix).
others_run() {
  if [ "$(id -u)" = 0 ] && command -v runuser >/dev/null 2>&1 && id nobody >/dev/null 2>&1; then
    (cd / && runuser -u nobody -- "$@") >/dev/null 2>&1
  else  # not root: every folder above the interpreter and its library must let others through
    "$@" >/dev/null 2>&1 && "$1" - >/dev/null 2>&1 <<'PY'
import os, sys, sysconfig
for path in (os.path.realpath(sys.executable), os.path.realpath(sysconfig.get_paths()["stdlib"])):
    while path != "/":
        path = os.path.dirname(path)
        if not os.stat(path).st_mode & 0o001:
            sys.exit(1)
PY
  fi
}
fits() { "$1" -c 'import sys, venv; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1; }
pick_python() {
  [ -n "${PYTHON:-}" ] && { command -v "$PYTHON"; return; }
  local c p
  for c in python3 /usr/bin/python3 /usr/local/bin/python3; do
    p=$(command -v "$c" 2>/dev/null) || continue
    fits "$p" && others_run "$p" -c 'import sys' && { echo "$p"; return; }
  done
  command -v python3
}
py=$(pick_python)
pyver() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])'; }
# A venv made before from an interpreter no other account can run: pointed at $py when that is the same
# Python (X.Y) and the venv does not lean on its old interpreter's own packages (seconds, every package
# kept); made again otherwise. Each file is replaced, never written over in place.
if [ -x .venv/bin/python ] && ! others_run "$PWD/.venv/bin/python" -c 'import sys' && others_run "$py" -c 'import sys' \
   && others_run "$py" -c "import os, sys; sys.exit(not os.access('$PWD/.venv/pyvenv.cfg', os.R_OK))"; then
  if [ "$(pyver .venv/bin/python 2>/dev/null)" = "$(pyver "$py")" ] && \
     grep -q '^include-system-site-packages = false' .venv/pyvenv.cfg; then
    say "pointing .venv at $py ($("$py" -V 2>&1)): its interpreter $(readlink -f .venv/bin/python) is one other accounts cannot run"
    real=$(readlink -f "$py")
    printf 'home = %s\ninclude-system-site-packages = false\nversion = %s\nexecutable = %s\ncommand = %s -m venv %s\n' \
      "$(dirname "$py")" "$("$py" -c 'import platform; print(platform.python_version())')" "$real" "$py" "$PWD/.venv" \
      > .venv/pyvenv.cfg.new
    mv .venv/pyvenv.cfg.new .venv/pyvenv.cfg
    ln -sfn "$py" .venv/bin/python3
    ln -sfn python3 .venv/bin/python
    ln -sfn python3 ".venv/bin/python$(pyver "$py")"
  elif ! grep -q '^include-system-site-packages = true' .venv/pyvenv.cfg; then
    say "making .venv again with $py ($("$py" -V 2>&1)): its interpreter $(readlink -f .venv/bin/python) is one other accounts cannot run"
    rm -rf .venv
  fi
fi
if [ ! -x .venv/bin/python ]; then
  say "creating the virtual environment .venv with $py ($("$py" -V 2>&1))"
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
# One install for start.sh and test.sh: the extras asked for are added to those the last install put in
# (test.sh's test tools stay for the next start, the sessions extra for the next test run), and a second
# run skips pip when nothing it reads changed: the stamp holds the hash of pyproject.toml, the interpreter
# and the extras installed, and gpufleet must be this checkout's (an editable install picks up code
# changes without pip).
stamp=.venv/.gpufleet-install
key="$(sha256sum < pyproject.toml | cut -c1-64) $(.venv/bin/python -V 2>&1)"
had=$(grep -o 'extras=[^ ]*' "$stamp" 2>/dev/null | head -n 1 | cut -d= -f2 || true)
want=${GPUFLEET_EXTRAS-sessions}
extras=$(printf '%s\n' ${had//,/ } ${want//,/ } | sort -u | paste -sd, -)
target="."
[ -n "$extras" ] && target=".[$extras]"
here="$PWD/backend/gpufleet/__init__.py"
covered=1
for e in ${want//,/ }; do [[ ",$had," == *",$e,"* ]] || covered=0; done
if [ "$(head -n 1 "$stamp" 2>/dev/null)" = "$key" ] && [ "$covered" = 1 ] && \
   [ "$(.venv/bin/python -c 'import gpufleet; print(gpufleet.__file__)' 2>/dev/null)" = "$here" ]; then
  echo "install: gpufleet in .venv is up to date (pyproject.toml unchanged; pip skipped)"
else
  say "installing gpufleet and its dependencies into .venv (${extras:+extras: $extras; }a minute or two the first time)"
  ticking "installing gpufleet" .venv/bin/pip install --quiet -e "$target"
  printf '%s\nextras=%s\n' "$key" "$extras" > "$stamp.new"
  mv "$stamp.new" "$stamp"
fi
if command -v npm >/dev/null 2>&1; then
  say "building the dashboard (skipped when frontend/ is unchanged)"
  bash scripts/build-frontend.sh
else
  # The API, worker and CLI work without it; / then says how to build it.
  echo "install: npm not found, so the dashboard is not built (install Node.js 20+ and run scripts/build-frontend.sh)" >&2
fi
