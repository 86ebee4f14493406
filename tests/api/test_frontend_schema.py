"""The dashboard's committed OpenAPI document is the server's: its types (src/api/schema.ts) are made from it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_committed_document_is_what_the_server_builds(tmp_path: Path) -> None:
    out = tmp_path / "openapi.json"
    # A clean environment, as a developer's shell running frontend/scripts/gen-api.sh would be:
    # no test settings leak into the document.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    subprocess.run([sys.executable, str(REPO / "frontend" / "scripts" / "openapi.py"), str(out)],
                   env=env, check=True, timeout=300)
    built = json.loads(out.read_text())
    committed = json.loads((REPO / "frontend" / "openapi.json").read_text())
    changed = sorted(set(built["paths"]) ^ set(committed["paths"])) + sorted(
        set(built["components"]["schemas"]) ^ set(committed["components"]["schemas"]))
    assert built == committed, f"run frontend/scripts/gen-api.sh (differs at least in {changed or 'contents'})"
