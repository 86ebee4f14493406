#!/usr/bin/env bash
# The README's second command: run every test — Python (unit, PostgreSQL,
# Redis, Celery workers, multi-process training, browser) and the dashboard's
# component tests. PostgreSQL and Redis are real servers: when
# GPUFLEET_TEST_DATABASE_URL / GPUFLEET_TEST_REDIS_URL are not set, this starts
# throwaway ones with .ci/services.sh (needs Debian's postgresql and
# redis-server; .ci/run installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
GPUFLEET_EXTRAS=test bash scripts/install.sh

if [ -z "${GPUFLEET_TEST_DATABASE_URL:-}" ] || [ -z "${GPUFLEET_TEST_REDIS_URL:-}" ]; then
  services_dir=$(mktemp -d "${TMPDIR:-/tmp}/gpufleet-services.XXXXXX")
  eval "$(bash .ci/services.sh start "$services_dir")"
  # Stop the servers and remove their data (tens of MB per run).
  trap 'bash .ci/services.sh stop "$services_dir"; rm -rf "$services_dir"' EXIT
fi

status=0
if [ -f frontend/package.json ]; then
  (cd frontend && npm test) || status=$?
fi
# The 25 slowest tests, so slow areas are known.
.venv/bin/python -m pytest --durations=25 "$@" || status=$?
exit $status
