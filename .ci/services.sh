#!/usr/bin/env bash
# Start a throwaway PostgreSQL and Redis on loopback and print the export lines
# for their URLs. Used by .ci/run and by developers:
#   eval "$(bash .ci/services.sh start /tmp/gpufleet-services)"
#   bash .ci/services.sh stop /tmp/gpufleet-services
set -euo pipefail
cmd=${1:-start}
dir=${2:-/tmp/gpufleet-services}
pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
pg_port=${GPUFLEET_PG_PORT:-55432}
redis_port=${GPUFLEET_REDIS_PORT:-56379}
# A restart of the same directory (tests stop and start PostgreSQL) keeps the
# ports it was first started with, whatever the caller's environment says.
if [ -f "$dir/ports" ]; then
  # shellcheck disable=SC1091
  . "$dir/ports"
fi
as_pg() {
  # PostgreSQL refuses to run as root; use the postgres account when we are root.
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
case "$cmd" in
start)
  mkdir -p "$dir"
  if [ "$(id -u)" = 0 ]; then chown postgres "$dir"; fi
  [ -f "$dir/ports" ] || printf 'pg_port=%s\nredis_port=%s\n' "$pg_port" "$redis_port" >"$dir/ports"
  if [ ! -f "$dir/pg/PG_VERSION" ]; then
    as_pg "$pg_bin/initdb" -D "$dir/pg" -U postgres -A trust >"$dir/initdb.log" 2>&1
  fi
  if ! as_pg "$pg_bin/pg_ctl" -D "$dir/pg" status >/dev/null 2>&1; then
    as_pg "$pg_bin/pg_ctl" -D "$dir/pg" -l "$dir/pg.log" -w \
      -o "-h 127.0.0.1 -p $pg_port -k $dir -c fsync=off -c max_connections=300" start >&2
  fi
  as_pg "$pg_bin/psql" -h 127.0.0.1 -p "$pg_port" -U postgres -tAc \
    "SELECT 1 FROM pg_database WHERE datname='gpufleet_test'" | grep -q 1 ||
    as_pg "$pg_bin/createdb" -h 127.0.0.1 -p "$pg_port" -U postgres gpufleet_test
  if redis-cli -p "$redis_port" ping >/dev/null 2>&1; then
    # Someone's Redis answers there: ours from an earlier start of this directory, or another run's, which
    # this one must neither use nor, at its stop, shut down.
    if [ ! -f "$dir/redis.pid" ] || ! kill -0 "$(cat "$dir/redis.pid")" 2>/dev/null; then
      echo "services: port $redis_port has a Redis this run did not start (no live pid file in $dir); set" \
        "GPUFLEET_REDIS_PORT to a free port, or stop that one (redis-cli -p $redis_port shutdown) if it is yours" >&2
      exit 1
    fi
  else
    redis-server --port "$redis_port" --bind 127.0.0.1 --daemonize yes --pidfile "$dir/redis.pid" \
      --dir "$dir" --logfile "$dir/redis.log" --save "" --appendonly no >&2
    for _ in $(seq 100); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
    # Daemonized, it can fail after the start returned (a port taken meanwhile): say so now, not as a
    # worker that cannot reach its broker minutes later.
    if ! redis-cli -p "$redis_port" ping >/dev/null 2>&1; then
      echo "services: Redis did not start on 127.0.0.1:$redis_port; its log ($dir/redis.log) ends:" >&2
      tail -n 5 "$dir/redis.log" >&2 2>/dev/null || true
      exit 1
    fi
  fi
  echo "export GPUFLEET_TEST_DATABASE_URL=postgresql+psycopg://postgres@127.0.0.1:$pg_port/gpufleet_test"
  echo "export GPUFLEET_TEST_REDIS_URL=redis://127.0.0.1:$redis_port/0"
  echo "export GPUFLEET_TEST_PG_CTL='$pg_bin/pg_ctl' GPUFLEET_TEST_PG_DATA='$dir/pg' GPUFLEET_TEST_PG_PORT=$pg_port"
  ;;
stop)
  as_pg "$pg_bin/pg_ctl" -D "$dir/pg" -m fast stop >/dev/null 2>&1 || true
  # Only the Redis this directory started (its pid file): never another run's on the same port.
  if [ -f "$dir/redis.pid" ] && kill -0 "$(cat "$dir/redis.pid")" 2>/dev/null; then
    redis-cli -p "$redis_port" shutdown nosave >/dev/null 2>&1 || kill "$(cat "$dir/redis.pid")" 2>/dev/null || true
  fi
  ;;
*) echo "usage: $0 start|stop [dir]" >&2; exit 2 ;;
esac
