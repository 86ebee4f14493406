#!/usr/bin/env bash
# Build the dashboard into backend/gpufleet/static/, where `gpufleet serve`
# serves it at /. Needs Node.js 20+ and npm. Installs exactly what
# frontend/package-lock.json pins (npm ci), so every machine builds the same.
#   scripts/build-frontend.sh            install + build
#   SKIP_NPM_CI=1 scripts/build-frontend.sh   build with the node_modules already there
# A step whose inputs did not change since it last ran is skipped (see below).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo/frontend"
if ! command -v npm >/dev/null 2>&1; then
    echo "build-frontend: npm not found; install Node.js 20 or newer (https://nodejs.org) and run again" >&2
    exit 1
fi
major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$major" -lt 20 ]; then
    echo "build-frontend: Node.js $(node --version) is too old; the dashboard needs Node.js 20 or newer" >&2
    exit 1
fi
# Each step is skipped when what it reads is unchanged since it last ran: npm ci
# when package-lock.json (and Node) are the same, the build when every source
# file under frontend/ is. The stamps hold those hashes; the build's lives in
# the output folder, so any other build there (which empties it) removes it.
hash_of() { sha256sum "$@" | sha256sum | cut -c1-64; }
deps="$(hash_of package-lock.json) node-$(node --version)"
if [ -d node_modules ] && { [ "${SKIP_NPM_CI:-0}" = "1" ] || [ "$(cat node_modules/.gpufleet-npm-ci 2>/dev/null)" = "$deps" ]; }; then
    echo "build-frontend: node_modules up to date (package-lock.json unchanged; npm ci skipped)"
else
    npm ci --no-audit --no-fund
    echo "$deps" > node_modules/.gpufleet-npm-ci
fi
static="$repo/backend/gpufleet/static"
# (tsc -b's *.tsbuildinfo is an output of the build, not a source.)
sources="$(find . -path ./node_modules -prune -o -type f ! -name '*.tsbuildinfo' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-64)"
if [ -f "$static/index.html" ] && [ "$(cat "$static/.gpufleet-build" 2>/dev/null)" = "$sources $deps" ]; then
    echo "build-frontend: dashboard up to date (frontend sources unchanged; build skipped)"
    exit 0
fi
npm run build
echo "$sources $deps" > "$static/.gpufleet-build"
echo "build-frontend: dashboard built into backend/gpufleet/static/ (served by gpufleet serve at /)"
