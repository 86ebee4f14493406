"""The Python client needs neither FastAPI nor the server's API package: its wire types come from gpufleet.wire."""

from __future__ import annotations

import subprocess
import sys

BLOCKED = """
import sys

class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("fastapi", "starlette") or name.startswith("gpufleet.api"):
            raise ImportError(f"{name} is not installed here")

sys.meta_path.insert(0, Refuse())
from gpufleet.client import Client, FINAL_STATUSES
from gpufleet.db.statuses import FINAL_STATUSES as DEFINED

assert FINAL_STATUSES == frozenset(DEFINED)
Client("http://127.0.0.1:9")
print("imported")
"""


def test_the_client_imports_without_fastapi_or_the_api_package() -> None:
    out = subprocess.run([sys.executable, "-c", BLOCKED], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "imported"
