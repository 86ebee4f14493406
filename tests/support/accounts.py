"""Real Unix accounts for the tests of local callers, and the `gpufleet` CLI run as one of them.

``unix_accounts(n)`` makes ``n`` accounts with `useradd` (the tests run as
root) and removes them with `userdel -r` afterwards. ``run_as(account, ...)``
runs the CLI of this environment as that account with `runuser`.

The account must be able to run this environment's interpreter. Where it
lives under a folder only root may enter (pyenv under /root), ``run_as``
starts the command in a mount namespace of its own in which that one folder
is replaced by a copy of its mode 0711 (enter, no listing) holding only the
interpreter's folder: nothing outside that process changes, and the account
reads no more of /root than the interpreter.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.servers import gpufleet


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    home: Path


def _need_root() -> None:
    if os.geteuid() != 0 or shutil.which("useradd") is None or shutil.which("runuser") is None:
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail("tests of local accounts need root, useradd and runuser (CI runs as root)")
        pytest.skip("needs root, useradd and runuser")


@contextmanager
def unix_accounts(count: int) -> Iterator[list[Account]]:
    """``count`` new login accounts (lowercase names, a home, bash), removed afterwards."""
    _need_root()
    made: list[Account] = []
    try:
        for _ in range(count):
            name = f"gft{uuid.uuid4().hex[:8]}"
            subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name], check=True,
                           capture_output=True, timeout=30)
            import pwd

            entry = pwd.getpwnam(name)
            made.append(Account(name, entry.pw_uid, Path(entry.pw_dir)))
        yield made
    finally:
        for account in made:
            subprocess.run(["userdel", "-r", account.name], capture_output=True, timeout=30, check=False)


def _closed_ancestor(path: Path) -> tuple[Path, Path] | None:
    """The first folder above ``path`` that other accounts may not enter, and its child on the way."""
    parts = path.resolve().parents
    for child, parent in zip([path.resolve(), *parts], parts):
        if parent != Path("/") and not parent.stat().st_mode & 0o001:
            return parent, child
    return None


def run_as(account: Account, *args: str, env: dict[str, str] | None = None, timeout: float = 120,
           hide: tuple[Path, ...] = ()) -> subprocess.CompletedProcess[str]:
    """`gpufleet ARGS` as ``account`` (exit status, stdout and stderr are the caller's to check).

    ``hide``: folders that look empty to the command (an empty tmpfs over each, in its own mount
    namespace), e.g. ``/run/gpufleet`` where another server of this machine listens."""
    base = {"PATH": "/usr/bin:/bin", "HOME": str(account.home), "LANG": "C.UTF-8", "COLUMNS": "200"}
    command = ["runuser", "-u", account.name, "--", "env", *(f"{k}={v}" for k, v in {**base, **(env or {})}.items()),
               *gpufleet(), *args]
    hides = [f'mount -t tmpfs tmpfs "{h}"' for h in hide if h.is_dir()]
    # The interpreter and, where it is a venv elsewhere, the venv (a checkout under /root, say).
    closed = {c for c in (_closed_ancestor(Path(sys.base_prefix)), _closed_ancestor(Path(sys.prefix))) if c}
    if not closed and not hides:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    folders = {folder for folder, _ in closed}
    if len(folders) > 1:
        pytest.fail(f"the interpreter and its venv sit under two closed folders {sorted(folders)}: "
                    "run the tests from a checkout other accounts may enter")
    with tempfile.TemporaryDirectory() as shadow:
        os.chmod(shadow, 0o711)
        binds = []
        for _, child in sorted(closed):
            inner = Path(shadow) / child.name
            inner.mkdir(exist_ok=True)
            binds.append(f'mount --bind "{child}" "{inner}"')
        binds += [f'mount --rbind "{shadow}" "{folder}"' for folder in folders]
        script = " && ".join([*hides, *binds, 'exec "$@"'])
        return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *command],
                              capture_output=True, text=True, timeout=timeout, check=False)
