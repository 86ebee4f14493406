"""The Python client needs neither FastAPI nor the server's API package: its wire types come from gpufleet.wire."""

from __future__ import annotations

import os
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


LIGHT = """
import sys
import gpufleet.client
from gpufleet.client import Client

heavy = sorted(m for m in ("sqlalchemy", "celery", "fastapi", "torch", "optuna", "gpufleet.config",
                           "gpufleet.db.models")
               if m in sys.modules)
assert heavy == [], heavy
# The shapes load with the call that reads them, and still without the server.
import gpufleet.wire as wire
assert wire.TrainingsPublic.__module__ == "gpufleet.wire.trainings"
assert "sqlalchemy" not in sys.modules
print("light")
"""


def test_the_client_loads_nothing_of_the_server() -> None:
    # `import gpufleet.client` should cost what `import httpx, pydantic` costs (bench/cli_start.py measures it).
    out = subprocess.run([sys.executable, "-c", LIGHT], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "light"


def test_every_shape_of_wire_is_a_name_of_wire() -> None:
    import ast
    from pathlib import Path

    import gpufleet.wire as wire

    package = Path(wire.__file__).parent
    defined = {(f"gpufleet.wire.{p.stem}", node.name) for p in package.glob("*.py") if p.name != "__init__.py"
               for node in ast.parse(p.read_text()).body if isinstance(node, ast.ClassDef)
               and not node.name.startswith("_")}
    listed = {(module, name) for module, names in wire.HOMES.items() for name in names}
    assert sorted(defined - listed) == []
    for module, name in sorted(listed):
        assert getattr(wire, name).__module__ == module, name


CLI_LS = """
import sys
from gpufleet.cli import main

try:
    main()
except SystemExit:
    pass
print(sorted(m for m in ("sqlalchemy", "gpufleet.config", "gpufleet.db.models", "celery", "fastapi", "torch")
             if m in sys.modules))
"""


def test_a_command_that_talks_to_a_server_loads_nothing_of_the_server(tmp_path) -> None:
    # A port nothing listens on: the command fails to connect, after loading all it needs to ask.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    env["GPUFLEET_DATA_DIR"] = str(tmp_path)
    out = subprocess.run([sys.executable, "-c", CLI_LS, "trainings", "ls", "--server", "http://127.0.0.1:9"],
                         capture_output=True, text=True, timeout=300, env=env)
    assert "cannot reach the server at http://127.0.0.1:9" in out.stderr, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout


CLI_LS_SERVED = """
import sys
from gpufleet.cli import main

try:
    main()
except SystemExit:
    pass
print(sorted(m for m in ("pydantic.main", "gpufleet.wire.trainings", "sqlalchemy", "torch") if m in sys.modules))
"""


def test_trainings_ls_prints_the_servers_page_without_building_its_shapes(tmp_path) -> None:
    # bench/cli_start.py times it: the typed page (13 shapes, and pydantic's model machinery) cost the
    # command more than its request, and a listing needs only the fields' text.
    import httpx

    from support.servers import serve_env, serve_process

    data = tmp_path / "data"
    with serve_process(data, GPUFLEET_EMBEDDED_WORKER="false") as srv:
        items = [{"name": f"listed-{i}", "recipe": "mlp", "memory_mb": 1024} for i in range(3)]
        r = httpx.post(f"{srv.url}/api/v1/trainings/batch", json={"items": items}, timeout=120)
        assert r.status_code == 201, r.text
        out = subprocess.run([sys.executable, "-c", CLI_LS_SERVED, "trainings", "ls", "--server", srv.url,
                              "--status", "queued", "--status", "scheduled"],
                             capture_output=True, text=True, timeout=300, env=serve_env(data))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0].split("\t") == ["ID", "NAME", "OWNER", "STATUS", "HOST", "GPUS", "STEP", "REASON"], lines
    listed = [line.split("\t") for line in lines[1:-1]]
    # No worker here: the scheduler has placed them on the two simulated GPUs, or one still waits.
    assert sorted(row[1] for row in listed) == ["listed-0", "listed-1", "listed-2"], (lines, out.stderr)
    assert all(row[2] == "local" and row[3] in ("queued", "scheduled") and row[6].startswith("0/")
               for row in listed), listed
    assert lines[-1] == "[]", lines
