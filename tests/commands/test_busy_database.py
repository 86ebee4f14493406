"""A CLI write while another process holds SQLite's write lock: it waits briefly, then says so in one line.

A running training's worker writes often. `users grant` read first and wrote
after, which fails at once ("database is locked") when a writer got in
between, and printed a long traceback. Here another connection holds the write
lock with a real write in progress, as a worker does.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.config import load_settings
from gpufleet.db.session import session_scope, upgrade_database
from gpufleet.users.accounts import add_user, get_user

GPUFLEET = str(Path(sys.executable).with_name("gpufleet"))


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    data = tmp_path / "gpufleet-data"
    settings = load_settings(data_dir=data)
    upgrade_database(settings)
    with session_scope(settings) as sess:
        add_user(sess, "alice", "member")
    return data


@pytest.fixture
def held_lock(data_dir: Path) -> Iterator[sqlite3.Connection]:
    """Another process's write in progress: the write lock held until the test commits it."""
    conn = sqlite3.connect(data_dir / "gpufleet.db", isolation_level=None, timeout=0)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("UPDATE users SET role = role")
    yield conn
    if conn.in_transaction:
        conn.execute("ROLLBACK")
    conn.close()


def _grant(data_dir: Path, busy_timeout_s: float) -> subprocess.Popen:
    env = {**os.environ, "GPUFLEET_DATA_DIR": str(data_dir), "GPUFLEET_CLI_BUSY_TIMEOUT_S": str(busy_timeout_s)}
    return subprocess.Popen([GPUFLEET, "users", "grant", "alice", "run_code"], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _may_run_code(data_dir: Path) -> bool:
    with session_scope(load_settings(data_dir=data_dir)) as sess:
        return get_user(sess, "alice").run_code


def test_a_lock_held_past_the_wait_is_one_line_and_changes_nothing(
        data_dir: Path, held_lock: sqlite3.Connection) -> None:
    proc = _grant(data_dir, busy_timeout_s=0.5)
    out, err = proc.communicate(timeout=120)
    held_lock.execute("ROLLBACK")
    assert proc.returncode == 2, (out, err)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "database is busy" in err and "GPUFLEET_CLI_BUSY_TIMEOUT_S" in err
    assert _may_run_code(data_dir) is False


def _has_open(pid: int, path: Path) -> bool:
    fds = Path(f"/proc/{pid}/fd")
    try:
        return any(os.path.realpath(fd) == str(path.resolve()) for fd in fds.iterdir())
    except OSError:
        return False


def test_a_lock_released_while_it_waits_lets_the_write_through(
        data_dir: Path, held_lock: sqlite3.Connection) -> None:
    proc = _grant(data_dir, busy_timeout_s=120)
    deadline = time.monotonic() + 120
    # Commit the other write once the command has the database open (it is reading or waiting for the lock).
    while not _has_open(proc.pid, data_dir / "gpufleet.db") and proc.poll() is None:
        assert time.monotonic() < deadline, "the command never opened the database"
        time.sleep(0.05)
    held_lock.execute("COMMIT")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, (out, err)
    assert _may_run_code(data_dir) is True, (out, err)
