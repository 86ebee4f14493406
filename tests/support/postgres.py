"""The test PostgreSQL server stopped and started again, for the outage tests (``pg_control`` fixture)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def pg_ctl(control: tuple[str, str], *args: str) -> None:
    """``pg_ctl ARGS`` on the test server (as the postgres account when we are root)."""
    ctl, data = control
    cmd = [ctl, "-D", data, *args]
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        cmd = ["runuser", "-u", "postgres", "--", *cmd]
    subprocess.run(cmd, check=True, capture_output=True, timeout=60)


def start_server(control: tuple[str, str]) -> None:
    """Start the stopped test server again, and drop every engine's stale connections."""
    # services.sh starts the server with the options the whole suite expects.
    services_dir = str(Path(control[1]).parent)
    subprocess.run(["bash", str(REPO / ".ci/services.sh"), "start", services_dir], check=True,
                   capture_output=True, timeout=120)
    # Every engine of this test process (the session fixtures' too) holds
    # connections to the server that just restarted; drop them so the next
    # checkout connects afresh instead of failing once.
    import gc

    from sqlalchemy import Engine

    for obj in gc.get_objects():
        try:
            if isinstance(obj, Engine):
                obj.dispose()
        except ReferenceError:  # a dead weak proxy in the heap
            continue
