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
echo "start: starting gpufleet serve $*"
# --link: print a sign-in link for the account that started it (the dashboard needs one).
exec .venv/bin/gpufleet serve --link "$@"
