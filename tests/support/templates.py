"""Migrated databases to copy: a test that needs the schema gets a copy instead of running the migrations.

Running the 18 migrations cost each SQLite-side test about a quarter of a second (more on a
loaded machine), and as much again on PostgreSQL; the migrations themselves are tested in
tests/db/, from an empty database and step by step. The PostgreSQL template is a session
fixture (``pg_template`` in tests/conftest.py): it needs the test server.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sqlite3
import tempfile
from contextlib import closing
from functools import cache
from pathlib import Path

from gpufleet.config import load_settings
from gpufleet.db.session import upgrade_database


@cache
def migrated_sqlite() -> Path:
    """An embedded database upgraded to head, made once per test process and removed at its exit."""
    root = Path(tempfile.mkdtemp(prefix="gpufleet-sqlite-template-"))
    atexit.register(shutil.rmtree, root, True)
    data = root / "gpufleet-data"
    upgrade_database(load_settings(data_dir=data))
    return data / "gpufleet.db"


def copy_sqlite(template: Path, data_dir: Path) -> None:
    """The template's pages into ``data_dir``'s embedded database, private as the product makes it."""
    data_dir.mkdir(parents=True, mode=0o700, exist_ok=True)
    target = data_dir / "gpufleet.db"
    os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    # SQLite's backup copies a consistent database whatever its write-ahead log holds.
    with closing(sqlite3.connect(template)) as src, closing(sqlite3.connect(target)) as dst:
        src.backup(dst)
