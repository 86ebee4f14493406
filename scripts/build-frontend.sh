#!/usr/bin/env bash
# Build the dashboard into backend/gpufleet/static/, where `gpufleet serve`
# serves it at /. Needs Node.js 20+ and npm. Installs exactly what
# frontend/package-lock.json pins (npm ci), so every machine builds the same.
#   scripts/build-frontend.sh            install + build
#   SKIP_NPM_CI=1 scripts/build-frontend.sh   build with the node_modules already there
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
if [ "${SKIP_NPM_CI:-0}" != "1" ] || [ ! -d node_modules ]; then
    npm ci --no-audit --no-fund
fi
npm run build
echo "build-frontend: dashboard built into backend/gpufleet/static/ (served by gpufleet serve at /)"
