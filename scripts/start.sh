#!/usr/bin/env bash
# The README's first command: install gpufleet, then start it on the embedded
# default (SQLite under the data dir, embedded worker and agent, no external
# service). Arguments go to `gpufleet serve` (e.g. --port 8080).
set -euo pipefail
cd "$(dirname "$0")/.."
# A server already on the port: say so before building into the folder it serves.
if [ -x .venv/bin/gpufleet ]; then
  check=0; said=$(.venv/bin/gpufleet serve --check "$@" 2>&1) || check=$?
  [ "$check" -eq 2 ] && { echo "$said" >&2; exit 2; }
fi
echo "start: installing gpufleet into .venv first (the first time takes a few minutes; later starts skip what is done)"
bash scripts/install.sh
# Teammates run this checkout's client as themselves (README "Team use and sign-in"): check that another
# account can, and say what to fix when it cannot (the server starts either way).
closed_above() {  # the first folder above $1 that other accounts may not enter
  local d=$1
  while [ "$d" != / ]; do
    d=$(dirname "$d")
    [ $(( 0$(stat -c %a "$d") & 1 )) -eq 0 ] && { echo "$d"; return; }
  done
  return 1
}
cli="$PWD/.venv/bin/gpufleet"
runs=1 why=""
if [ "$(id -u)" = 0 ] && command -v runuser >/dev/null 2>&1 && id nobody >/dev/null 2>&1; then
  why=$(cd / && runuser -u nobody -- "$cli" --help 2>&1 >/dev/null) || runs=0
elif closed=$(closed_above "$(readlink -f .venv/bin/python)") || closed=$(closed_above "$cli"); then
  runs=0 why="$closed is closed to them"
fi
if [ "$runs" = 0 ]; then
  echo "start: other accounts on this machine cannot run $cli, so teammates have no gpufleet command ($(tail -n 1 <<<"$why"))" >&2
  if closed=$(closed_above "$PWD/.venv/bin"); then
    echo "start: to fix: the checkout is under $closed (mode $(stat -c %a "$closed")), which other accounts cannot enter; move the checkout where they can (e.g. /opt/gpufleet) and start it from there" >&2
  elif closed=$(closed_above "$(readlink -f .venv/bin/python)"); then
    echo "start: to fix: .venv's interpreter $(readlink -f .venv/bin/python) is under $closed (mode $(stat -c %a "$closed")); install a Python 3.11+ every account can run (Debian: apt-get install python3 python3-venv), remove .venv and start again, or name one: PYTHON=/path/to/python3 bash scripts/start.sh" >&2
  fi
else
  echo "start: teammates run $cli as themselves (or link it onto their PATH: ln -s $cli /usr/local/bin/gpufleet)"
fi
echo "start: starting gpufleet serve $*"
# --link: print a sign-in link for the account that started it (the dashboard needs one).
exec .venv/bin/gpufleet serve --link "$@"
