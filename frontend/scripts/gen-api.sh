#!/usr/bin/env bash
# Regenerate the dashboard's API types from the server's OpenAPI schema.
#   frontend/openapi.json      the schema as the server builds it (scripts/openapi.py;
#                              tests/api/test_frontend_schema.py checks it is current)
#   frontend/src/api/schema.ts TypeScript types made from it (openapi-typescript), with
#                              the values of each enum as arrays (--enum-values)
# Both are committed, so a fresh clone builds without a running server.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
repo="$(cd "$here/.." && pwd)"
python="${PYTHON:-$repo/.venv/bin/python}"
[ -x "$python" ] || python=python3
"$python" "$here/scripts/openapi.py" "$here/openapi.json"
cd "$here"
npx --no-install openapi-typescript openapi.json --enum-values -o src/api/schema.ts
