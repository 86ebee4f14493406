"""Real Unix accounts for tests that run as root (CI does): made with useradd, removed with userdel -r."""

from __future__ import annotations

import os
import pwd
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest


def need_root() -> None:
    if os.geteuid() != 0:
        pytest.fail("this test creates Unix accounts and starts gpufleet as root; run the suite as root (CI does)")


def short_name(prefix: str) -> str:
    """A fresh account name (Unix names stay within 32 characters)."""
    return f"{prefix}{uuid.uuid4().hex[:8]}"


@contextmanager
def unix_account(name: str, *, system: bool = False) -> Iterator[pwd.struct_passwd]:
    need_root()
    kind = ["--system"] if system else []
    subprocess.run(["useradd", *kind, "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
                    "--shell", "/usr/sbin/nologin", name], check=True, capture_output=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        # userdel refuses while a process of the account still runs: a sandbox just killed may take a moment
        # to take its namespace's processes with it.
        deadline = time.monotonic() + 10
        while subprocess.run(["userdel", "-r", name], check=False, capture_output=True).returncode != 0:
            if subprocess.run(["userdel", name], check=False, capture_output=True).returncode == 0:
                break
            try:
                pwd.getpwnam(name)
            except KeyError:
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)


def as_account(entry: pwd.struct_passwd, *argv: str, env: dict[str, str] | None = None,
               cwd: str | None = None) -> subprocess.CompletedProcess:
    """``argv`` run as that account (its uid, gid and no other group); ``env``: its whole environment."""
    return subprocess.run(["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups",
                           "--", *argv], check=False, capture_output=True, text=True, timeout=60, env=env, cwd=cwd)
