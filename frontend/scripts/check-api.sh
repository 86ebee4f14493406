#!/usr/bin/env bash
# Check that src/api/schema.ts is what openapi-typescript makes of the committed openapi.json
# (tests/api/test_frontend_schema.py checks that openapi.json is the server's current schema):
# a hand edit of schema.ts, or a schema change without `npm run gen:api`, fails here.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cd "$here"
made="$(mktemp "${TMPDIR:-/tmp}/schema.XXXXXX.ts")"
trap 'rm -f "$made"' EXIT
npx --no-install openapi-typescript openapi.json --enum-values -o "$made" >/dev/null
if ! diff -u src/api/schema.ts "$made" >&2; then
  echo "check:api: src/api/schema.ts is not what openapi.json generates; run \`npm run gen:api\`" >&2
  exit 1
fi
echo "check:api: src/api/schema.ts matches openapi.json"
