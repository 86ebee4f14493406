#!/usr/bin/env bash
# Regenerate the dashboard's API types from the server's live OpenAPI schema.
#   frontend/openapi.json        the schema as the server builds it
#   frontend/src/api/schema.d.ts TypeScript types made from it (openapi-typescript)
# Both are committed, so a fresh clone builds without a running server.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
repo="$(cd "$here/.." && pwd)"
python="${PYTHON:-$repo/.venv/bin/python}"
[ -x "$python" ] || python=python3
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
GPUFLEET_DATA_DIR="$tmp" "$python" - "$here/openapi.json" <<'PY'
import json, sys
from gpufleet.api.app import create_app
from gpufleet.config import load_settings

app = create_app(load_settings(simulate="4xH100-80GB"))
with open(sys.argv[1], "w") as fh:
    json.dump(app.openapi(), fh, indent=1, sort_keys=True)
    fh.write("\n")
PY
cd "$here"
npx --no-install openapi-typescript openapi.json -o src/api/schema.d.ts
