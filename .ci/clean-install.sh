#!/usr/bin/env bash
# A clean install is a real package: build a wheel from a clean clone of HEAD
# (its build step builds the dashboard into it), install that wheel alone (no
# test extras, no source tree) into a fresh venv, then
#   - `gpufleet serve` (embedded) answers /healthz and serves the dashboard at /,
#   - the package carries the top-level alembic/ as gpufleet/db/migrations, and
#     `gpufleet db upgrade` finds the migrations inside it, and
#   - `gpufleet worker` on the CI Redis and PostgreSQL answers `celery inspect
#     ping` and lists its task.
# A dependency that only the test extras happened to bring fails here, and so
# does anything the package finds only beside a checkout.
#   bash .ci/clean-install.sh WORKDIR   (needs GPUFLEET_TEST_DATABASE_URL, GPUFLEET_TEST_REDIS_URL)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
work=${1:?usage: .ci/clean-install.sh WORKDIR}
: "${GPUFLEET_TEST_DATABASE_URL:?start the services first (.ci/services.sh)}"
: "${GPUFLEET_TEST_REDIS_URL:?start the services first (.ci/services.sh)}"
venv="$work/clean-venv"
rm -rf "$venv" "$work/clean-src" "$work/clean-wheel"
started=$(date +%s)
git clone --quiet --no-hardlinks "$repo" "$work/clean-src"
pip wheel --quiet --no-deps -w "$work/clean-wheel" "$work/clean-src"
wheel=$(ls "$work"/clean-wheel/gpufleet-*.whl)
python3 -m venv "$venv"
# As scripts/install.sh does: torch first, pinned to the build this machine
# has, then the package, whose torch range that build satisfies.
"$venv/bin/pip" install --quiet "torch==2.13.0"
"$venv/bin/pip" install --quiet "$wheel"
rm -rf "$work/clean-src"
echo "clean install: wheel built from a clean clone and installed in $(( $(date +%s) - started )) s"
cd "$work"
if "$venv/bin/python" -c "import gpufleet, sys; sys.exit(0 if '/clean-venv/' in gpufleet.__file__ else 1)"; then :; else
  echo "clean install: gpufleet is not imported from the venv's site-packages" >&2
  exit 1
fi
# The checkout's top-level alembic/ ships as gpufleet/db/migrations: every step of it, and nothing else.
"$venv/bin/python" - "$repo/alembic/versions" <<'PY'
import sys
from pathlib import Path
import gpufleet.db.session as session
shipped = sorted(p.name for p in (session.ALEMBIC_DIR / "versions").glob("*.py"))
source = sorted(p.name for p in Path(sys.argv[1]).glob("*.py"))
assert "/clean-venv/" in str(session.ALEMBIC_DIR) and (session.ALEMBIC_DIR / "env.py").is_file(), session.ALEMBIC_DIR
assert shipped == source, (shipped, source)
print(f"clean install: the wheel carries alembic/ ({len(shipped)} migrations) as gpufleet/db/migrations")
PY
bash "$repo/.ci/serve-check.sh" "$venv" "$work"

db="gpufleet_clean_$$"
base=${GPUFLEET_TEST_DATABASE_URL%/*}
"$venv/bin/python" - "$base/postgres" "$db" <<'PY'
import sys
from sqlalchemy import create_engine, text
engine = create_engine(sys.argv[1], isolation_level="AUTOCOMMIT")
with engine.connect() as conn:
    conn.execute(text(f'DROP DATABASE IF EXISTS "{sys.argv[2]}"'))
    conn.execute(text(f'CREATE DATABASE "{sys.argv[2]}"'))
PY
export GPUFLEET_DATABASE_URL="$base/$db" GPUFLEET_REDIS_URL="$GPUFLEET_TEST_REDIS_URL"
export GPUFLEET_DATA_DIR="$work/clean-data" GPUFLEET_SIMULATE=1xH100-80GB
host="ci-clean-$$"
"$venv/bin/gpufleet" db upgrade
"$venv/bin/gpufleet" worker --host-name "$host" --no-agent >"$work/clean-worker.log" 2>&1 &
worker=$!
cleanup() {
  kill -TERM "$worker" 2>/dev/null || true
  wait "$worker" 2>/dev/null || true
}
trap cleanup EXIT
ok=""
for _ in $(seq 1 60); do
  if ! kill -0 "$worker" 2>/dev/null; then
    echo "clean install: the worker exited:" >&2
    cat "$work/clean-worker.log" >&2
    exit 1
  fi
  if "$venv/bin/celery" -A gpufleet.jobs.celery_app inspect ping -d "gpufleet@$host" --timeout 2 >/dev/null 2>&1; then
    ok=1
    break
  fi
  sleep 1
done
if [ -z "$ok" ]; then
  echo "clean install: the worker never answered celery inspect ping:" >&2
  cat "$work/clean-worker.log" >&2
  exit 1
fi
registered=$("$venv/bin/celery" -A gpufleet.jobs.celery_app inspect registered -d "gpufleet@$host" --timeout 5)
if ! grep -q gpufleet.run_training <<<"$registered"; then
  echo "clean install: the worker does not list gpufleet.run_training:" >&2
  echo "$registered" >&2
  exit 1
fi
echo "clean install: gpufleet worker on Redis answers celery inspect ping and lists gpufleet.run_training"
