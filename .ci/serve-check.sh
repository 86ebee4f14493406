#!/usr/bin/env bash
# `gpufleet serve` from an installed package (no source tree): embedded SQLite,
# simulated GPUs; /healthz answers and / is the built dashboard.
#   bash .ci/serve-check.sh VENV WORKDIR
set -euo pipefail
venv=${1:?usage: .ci/serve-check.sh VENV WORKDIR}
work=${2:?usage: .ci/serve-check.sh VENV WORKDIR}
free_port() { "$venv/bin/python" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"; }
port=$(free_port)
# The notebooks' origin on a port of its own: by default it takes the API's port + 1, which may be taken here.
notebooks_port=$(free_port)
log="$work/clean-serve.log"
# exec: $! is then the server itself, so the trap below stops it (not only a subshell).
# Its own socket: the default one (/run/gpufleet as root) is the machine's.
(cd "$work" && exec env -u GPUFLEET_DATABASE_URL -u GPUFLEET_REDIS_URL GPUFLEET_DATA_DIR="$work/clean-serve-data" \
  GPUFLEET_UNIX_SOCKET="$work/clean-serve.sock" GPUFLEET_SIMULATE=1xH100-80GB GPUFLEET_SESSIONS_PORT="$notebooks_port" \
  "$venv/bin/gpufleet" serve --port "$port" >"$log" 2>&1) &
server=$!
stop() {
  kill -TERM "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
}
trap stop EXIT
# This check runs niced beside the test shards, so a slow answer is not a failure here: a generous timeout.
fetch() {
  "$venv/bin/python" -c "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=60).read().decode())" "$1"
}
healthy=""
for _ in $(seq 1 90); do
  if ! kill -0 "$server" 2>/dev/null; then
    echo "clean install: gpufleet serve exited:" >&2
    cat "$log" >&2
    exit 1
  fi
  if fetch "http://127.0.0.1:$port/healthz" >/dev/null 2>&1; then
    healthy=1
    break
  fi
  sleep 1
done
if [ -z "$healthy" ]; then
  echo "clean install: gpufleet serve never answered /healthz:" >&2
  cat "$log" >&2
  exit 1
fi
page=$(fetch "http://127.0.0.1:$port/")
if ! grep -q '<div id="root">' <<<"$page" || ! grep -q '/assets/' <<<"$page"; then
  echo "clean install: / is not the built dashboard:" >&2
  echo "$page" | head -20 >&2
  exit 1
fi
echo "clean install: gpufleet serve from the wheel answers /healthz and serves the dashboard at /"
