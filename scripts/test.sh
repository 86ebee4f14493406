#!/usr/bin/env bash
# The README's second command: run every test — Python (unit, PostgreSQL,
# Redis, Celery workers, multi-process training, browser) and the dashboard's
# component tests. PostgreSQL and Redis are real servers: when
# GPUFLEET_TEST_DATABASE_URL / GPUFLEET_TEST_REDIS_URL are not set, this starts
# throwaway ones with .ci/services.sh (needs Debian's postgresql and
# redis-server; .ci/run installs them).
#
# With no arguments the suite runs in GPUFLEET_TEST_SHARDS shards at once
# (default: 2 where the machine has 2 cores or more). Most of the suite waits
# on processes it started (workers, launchers, browsers), so two shards use two
# cores where one leaves one idle. Each shard gets its own PostgreSQL and Redis,
# so shards share nothing but the machine; tests/.test_durations balances them.
# With arguments (a file, -k …) it is one ordinary pytest run.
#
# The throwaway servers listen on loopback at GPUFLEET_PG_PORT and GPUFLEET_REDIS_PORT (shard i at the
# port + 10 i); unset, each takes a free port below the range for outgoing connections (where no connection's
# local end can take it first), so two people's runs on one box never meet.
set -euo pipefail
cd "$(dirname "$0")/.."
GPUFLEET_EXTRAS=test bash scripts/install.sh
# A free port below the kernel's range for outgoing connections, where no connection's local end can take
# it before the server binds it.
free_port() {
  .venv/bin/python -c 'import random, socket
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
while True:
    port = random.randrange(10000, low - 1)
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
    print(port)
    break'
}

cores=$(nproc 2>/dev/null || echo 1)
shards=${GPUFLEET_TEST_SHARDS:-$([ "$cores" -ge 2 ] && echo 2 || echo 1)}
[ $# -gt 0 ] && shards=1

status=0
if [ "$shards" -le 1 ]; then
  if [ -f frontend/package.json ]; then
    (cd frontend && npm test) || status=$?
  fi
  if [ -z "${GPUFLEET_TEST_DATABASE_URL:-}" ] || [ -z "${GPUFLEET_TEST_REDIS_URL:-}" ]; then
    services_dir=$(mktemp -d "${TMPDIR:-/tmp}/gpufleet-services.XXXXXX")
    # Stop the servers and remove their data (tens of MB per run).
    trap 'bash .ci/services.sh stop "$services_dir"; rm -rf "$services_dir"' EXIT
    services_env=$(GPUFLEET_PG_PORT=${GPUFLEET_PG_PORT:-$(free_port)} \
      GPUFLEET_REDIS_PORT=${GPUFLEET_REDIS_PORT:-$(free_port)} bash .ci/services.sh start "$services_dir")
    eval "$services_env"
  fi
  .venv/bin/python -m pytest --durations=25 "$@" || status=$?
  exit $status
fi

# Sharded run: shard i has services on ports base+i, its own log, and its own
# exit status; the closing line adds the shards' counts up.
runs=$(mktemp -d "${TMPDIR:-/tmp}/gpufleet-shards.XXXXXX")
chmod 755 "$runs"  # PostgreSQL runs as the postgres account when we are root
pg_base=${GPUFLEET_PG_PORT:-}
redis_base=${GPUFLEET_REDIS_PORT:-}
stop_all() {
  for dir in "$runs"/services-*; do
    [ -d "$dir" ] && bash .ci/services.sh stop "$dir"
  done
  rm -rf "$runs"
}
trap stop_all EXIT
# The dashboard's tests run beside the shards, at a lower priority: the shards leave a core idle
# now and then (waiting on the processes they start), and the dashboard's tests use that time
# instead of a minute of their own before the shards.
frontend_pid=""
if [ -f frontend/package.json ]; then
  (cd frontend && exec nice -n 10 npm test) >"$runs/frontend.log" 2>&1 &
  frontend_pid=$!
fi
# GPUFLEET_TEST_STORE_DURATIONS=1 records this run's durations into tests/.test_durations
# (each shard writes only its own tests' durations; the files are merged at the end).
store=()
[ -n "${GPUFLEET_TEST_STORE_DURATIONS:-}" ] && store=(--store-durations --clean-durations)
pids=()
for i in $(seq 1 "$shards"); do
  dir="$runs/services-$i"
  durations="$runs/durations-$i.json"
  if [ -f tests/.test_durations ]; then cp tests/.test_durations "$durations"; fi
  (
    pg_port=$([ -n "$pg_base" ] && echo $((pg_base + 10 * i)) || free_port)
    redis_port=$([ -n "$redis_base" ] && echo $((redis_base + 10 * i)) || free_port)
    # An assignment: a services start that fails ends this shard here, saying why, not in every test.
    services_env=$(GPUFLEET_PG_PORT=$pg_port GPUFLEET_REDIS_PORT=$redis_port bash .ci/services.sh start "$dir")
    eval "$services_env"
    # -c: pytest looks for its settings before plugins name their options, so it takes
    # --durations-path's value for a test path, looks in /tmp and would run without
    # pyproject.toml's settings (markers, the per-test timeout); --rootdir alone does not help.
    exec .venv/bin/python -m pytest -c pyproject.toml -p no:cacheprovider --rootdir "$PWD" --durations=15 \
      --splits "$shards" --group "$i" --durations-path "$durations" "${store[@]}"
  ) >"$runs/shard-$i.log" 2>&1 &
  pids+=($!)
done
for i in $(seq 1 "$shards"); do
  wait "${pids[$((i - 1))]}" || status=$?
  echo "===== shard $i of $shards ====="
  cat "$runs/shard-$i.log"
done
if [ -n "$frontend_pid" ]; then
  frontend_status=0
  wait "$frontend_pid" || frontend_status=$?
  echo "===== dashboard tests (npm test) ====="
  cat "$runs/frontend.log"
  [ "$frontend_status" -eq 0 ] || { echo "dashboard tests failed (exit $frontend_status)"; status=$frontend_status; }
fi
.venv/bin/python scripts/shard_summary.py "$runs"/shard-*.log || status=$?
if [ ${#store[@]} -gt 0 ]; then
  .venv/bin/python -c 'import json, sys
merged = {}
for path in sys.argv[1:]:
    merged.update(json.load(open(path)))
json.dump(merged, open("tests/.test_durations", "w"), sort_keys=True, indent=1)' "$runs"/durations-*.json
fi
exit $status
