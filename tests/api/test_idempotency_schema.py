"""The OpenAPI document declares ``Idempotency-Key`` on exactly the creates that take it, with its answers.

A generated client has a typed way to send the key only when the document
says so: the header parameter on each create (api/idempotency.py's
``CREATES``), the ``Idempotent-Replayed`` header on their answers, and the 409
a reused key gets. The dashboard's own types (openapi-typescript, as
``npm run gen:api`` makes them) and a Python client (openapi-python-client)
are generated from the document here, and each has the parameter.
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpufleet.api.app import create_app
from gpufleet.api.idempotency import CREATES, MAX_KEY
from gpufleet.config import load_settings

REPO = Path(__file__).resolve().parents[2]
KEY = "Idempotency-Key"


def _schema(tmp_path: Path) -> dict[str, Any]:
    return create_app(load_settings(data_dir=tmp_path / "data", simulate="1xH100-80GB")).openapi()


def _takes_key(op: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in op.get("parameters", []) if p.get("in") == "header" and p["name"].lower() == KEY.lower()]


def test_the_key_its_replay_header_and_the_409_are_declared_on_exactly_the_creates(tmp_path: Path) -> None:
    schema = _schema(tmp_path)
    taking = {(path, method) for path, ops in schema["paths"].items() for method, op in ops.items()
              if isinstance(op, dict) and _takes_key(op)}
    assert taking == {(path, "post") for path in CREATES}
    for path in CREATES:
        op = schema["paths"][path]["post"]
        [param] = _takes_key(op)
        assert param["required"] is False and param["schema"] == {"type": "string", "minLength": 1,
                                                                   "maxLength": MAX_KEY}, param
        assert "24 hours" in param["description"]
        ok = [code for code in op["responses"] if code.startswith("2")]
        assert ok, op["responses"]
        for code in ok:
            replayed = op["responses"][code]["headers"]["Idempotent-Replayed"]
            assert replayed["schema"] == {"type": "string", "enum": ["true"]}, replayed
        conflict = op["responses"]["409"]
        assert "Idempotency-Key" in conflict["description"] and "Retry-After" in conflict["headers"]
        assert conflict["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorDetail")
        assert "Idempotency-Key" in op["responses"]["400"]["description"]


def test_generated_clients_have_the_typed_parameter(tmp_path: Path) -> None:
    spec = tmp_path / "openapi.json"
    spec.write_text(json.dumps(_schema(tmp_path)))
    # The dashboard's own generation (frontend/scripts/gen-api.sh), on the document as built now.
    out = tmp_path / "schema.ts"
    npx = shutil.which("npx")
    assert npx is not None, "npx (Node.js) is needed, as for the dashboard's build"
    made = subprocess.run([npx, "--no-install", "openapi-typescript", str(spec), "--enum-values", "-o", str(out)],
                          cwd=REPO / "frontend", capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stdout + made.stderr
    ts = out.read_text()
    for op_id in ("trainings-create", "trainings-create-batch", "sessions-create", "sweeps-create"):
        block = re.search(rf'^    "{op_id}": {{\n        parameters: {{\n(.*?)\n        }};', ts, re.S | re.M)
        assert block is not None, op_id
        assert re.search(r'header\?: \{\n\s+/\*\*.*?\*/\n\s+"Idempotency-Key"\?: string;', block.group(1), re.S), \
            (op_id, block.group(1))
    # The committed types are the same (npm run check:api compares them with the committed document).
    committed = (REPO / "frontend" / "src" / "api" / "schema.ts").read_text()
    assert committed.count('"Idempotency-Key"?: string;') == len(CREATES)
    assert ts.count('"Idempotency-Key"?: string;') == len(CREATES)
    assert ts.count('"Idempotent-Replayed"?: "true";') >= len(CREATES)

    # Another language's generator: a Python client whose create takes the key as a typed argument.
    gen = Path(sys.executable).with_name("openapi-python-client")
    if not gen.exists():
        pytest.fail("openapi-python-client is not installed: pip install -e '.[test]'")
    config = tmp_path / "generator.yaml"
    config.write_text("post_hooks: []\npackage_name_override: gpufleet_keyed\n")
    made = subprocess.run([str(gen), "generate", "--path", str(spec), "--meta", "none", "--config", str(config),
                           "--output-path", str(tmp_path / "gpufleet_keyed")], capture_output=True, text=True,
                          timeout=300)
    assert made.returncode == 0 and "warning" not in (made.stdout + made.stderr).lower(), made.stdout + made.stderr
    sys.path.insert(0, str(tmp_path))
    try:
        create = importlib.import_module("gpufleet_keyed.api.trainings.trainings_create")
        param = inspect.signature(create.sync_detailed).parameters["idempotency_key"]
        assert "str" in str(param.annotation), param
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m.startswith("gpufleet_keyed")]:
            del sys.modules[name]
