"""Files are private from the first command: whatever command makes the data dir makes it 0700, and the
database in it (users, token hashes) 0600 with its -wal and -shm files, whatever the caller's umask."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
from pathlib import Path

import pytest

from support.servers import gpufleet, serve_env


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _run_with_open_umask(data: Path, *args: str) -> None:
    # 022: what a login shell usually has, and what made the data dir 0755 and the database 0644.
    proc = subprocess.run([*gpufleet(), *args], env=serve_env(data), capture_output=True, text=True, timeout=120,
                          preexec_fn=lambda: os.umask(0o022), check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("first", [("users", "add", "ann"), ("db", "upgrade"), ("tokens", "list")])
def test_the_first_command_makes_the_data_dir_private(tmp_path: Path, first: tuple[str, ...]) -> None:
    data = tmp_path / "fresh" / "gpufleet"
    if first[0] == "tokens":
        # A read of a database made by an older gpufleet's first command.
        _run_with_open_umask(data, "db", "upgrade")
    _run_with_open_umask(data, *first)
    assert _mode(data) == 0o700
    db = data / "gpufleet.db"
    assert _mode(db) == 0o600
    for entry in data.iterdir():
        assert not _mode(entry) & 0o077, f"{entry.name} is {oct(_mode(entry))}"


def test_the_database_companions_are_as_private_as_the_database(tmp_path: Path) -> None:
    data = tmp_path / "gpufleet"
    _run_with_open_umask(data, "users", "add", "ann")
    old = os.umask(0o022)
    try:
        conn = sqlite3.connect(data / "gpufleet.db")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("UPDATE users SET role = role")
        conn.commit()
        # While a connection is open SQLite keeps its write-ahead log and shared memory beside the file.
        for suffix in ("-wal", "-shm"):
            companion = data / f"gpufleet.db{suffix}"
            assert companion.exists() and _mode(companion) == 0o600, suffix
        conn.close()
    finally:
        os.umask(old)


def test_the_library_makes_a_new_database_private(tmp_path: Path) -> None:
    from gpufleet.db.session import make_engine

    old = os.umask(0o022)
    try:
        target = tmp_path / "lib" / "gpufleet.db"
        engine = make_engine(f"sqlite:///{target}")
        with engine.connect() as conn:
            conn.exec_driver_sql("CREATE TABLE t (x INTEGER)")
        engine.dispose()
    finally:
        os.umask(old)
    assert _mode(target.parent) == 0o700
    assert _mode(target) == 0o600
