"""scripts/test.sh cleans up the throwaway PostgreSQL and Redis it starts, and its shards add up."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from support.servers import free_port

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _need_services() -> None:
    if not list(Path("/usr/lib/postgresql").glob("*/bin/initdb")) or shutil.which("redis-server") is None:
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail("PostgreSQL and Redis are needed (.ci/run installs them)")
        pytest.skip("PostgreSQL or Redis is not installed")


def _script_copy() -> Path:
    """A copy of the script beside the real services helper. Installing is not
    what is tested: install.sh here does nothing."""
    root = Path(tempfile.mkdtemp(prefix="gpufleet-testsh-", dir="/tmp"))
    os.chmod(root, 0o755)  # PostgreSQL runs as the postgres account when we are root
    (root / "scripts").mkdir()
    (root / ".ci").mkdir()
    for part in ("scripts/test.sh", "scripts/shard_summary.py", ".ci/services.sh", "pyproject.toml"):
        shutil.copy(REPO / part, root / part)
    (root / "scripts" / "install.sh").write_text("exit 0\n")
    (root / ".venv" / "bin").mkdir(parents=True)
    # A wrapper, not a link: Python finds its venv (and pytest-split) from the path it was started by,
    # and a link from a folder without pyvenv.cfg falls back to the bare system interpreter.
    python = root / ".venv" / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    tmp = root / "tmp"
    tmp.mkdir(mode=0o755)
    os.chmod(tmp, 0o755)
    return root


def _free_base() -> int:
    """A port free with the shards' ports beside it (the port + 10 i): none of them another run's server."""
    while True:
        port = free_port()
        socks = [socket.socket() for _ in range(3)]
        try:
            for i, sock in enumerate(socks):
                sock.bind(("127.0.0.1", port + 10 * i))
            return port
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()


def _run(root: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    env.update(TMPDIR=str(root / "tmp"), GPUFLEET_PG_PORT=str(_free_base()), GPUFLEET_REDIS_PORT=str(_free_base()))
    env.update(extra)
    return subprocess.run(["bash", str(root / "scripts" / "test.sh"), *args], env=env, cwd=root,
                          capture_output=True, text=True, timeout=300)


def test_test_script_removes_its_services_directory_on_exit():
    _need_services()
    root = _script_copy()
    try:
        out = _run(root, "--version")
        assert out.returncode == 0, out.stdout + out.stderr
        assert "pytest" in out.stdout + out.stderr
        assert not list((root / "tmp").glob("gpufleet-services.*")), "the services directory was left behind"
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_shards_each_get_their_own_services_and_their_counts_add_up():
    _need_services()
    root = _script_copy()
    try:
        # Five tests, one failing; each reads the services URL its shard was given.
        (root / "tests").mkdir()
        (root / "tests" / "test_tiny.py").write_text(
            "import os\n"
            "import pytest\n"
            "@pytest.mark.parametrize('n', range(4))\n"
            "def test_ok(n):\n"
            "    with open(os.path.join(os.path.dirname(__file__), 'urls.txt'), 'a') as f:\n"
            "        f.write(os.environ['GPUFLEET_TEST_DATABASE_URL'] + '\\n')\n"
            "def test_broken():\n"
            "    assert False\n"
        )
        out = _run(root, GPUFLEET_TEST_SHARDS="2")
        text = out.stdout + out.stderr
        assert out.returncode != 0, text
        assert text.strip().splitlines()[-1] == "tests: 4 passed, 1 failed", text
        assert "===== shard 2 of 2 =====" in text
        # Each shard reads the checkout's settings, not the folder of its durations file.
        assert text.count(f"rootdir: {root}") == 2, text
        assert text.count("configfile: pyproject.toml") == 2, text
        urls = set((root / "tests" / "urls.txt").read_text().split())
        assert len(urls) == 2, f"two shards, two PostgreSQL servers: {urls}"
        assert not list((root / "tmp").glob("gpufleet-shards.*")), "the shards' services were left behind"
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_without_ports_named_the_services_take_free_ones_beside_a_run_on_the_old_fixed_ports():
    """Another person's run holds the ports every run once took (55432, 56379, and the shards' +10, +20)."""
    _need_services()
    root = _script_copy()
    held = []
    try:
        for port in (55432, 56379, 55442, 56389, 55452, 56399):
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", port))
            except OSError:  # someone's server is there already: just as held
                s.close()
                continue
            s.listen()
            held.append(s)
        (root / "tests").mkdir()
        (root / "tests" / "test_tiny.py").write_text("def test_one():\n    pass\n\ndef test_two():\n    pass\n")
        for args, shards in ((["tests"], "1"), ([], "2")):
            out = _run(root, *args, GPUFLEET_TEST_SHARDS=shards, GPUFLEET_PG_PORT="", GPUFLEET_REDIS_PORT="")
            text = out.stdout + out.stderr
            assert out.returncode == 0, text
            assert "2 passed" in text or text.strip().splitlines()[-1] == "tests: 2 passed, 0 failed", text
    finally:
        for s in held:
            s.close()
        shutil.rmtree(root, ignore_errors=True)


def test_a_shard_without_a_summary_fails_the_run(tmp_path: Path):
    done = tmp_path / "shard-1.log"
    done.write_text("...\n========== 3 passed, 1 skipped in 2.00s ==========\n")
    killed = tmp_path / "shard-2.log"
    killed.write_text("tests/test_a.py ..\nKilled\n")
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "shard_summary.py"), str(done), str(killed)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert out.stdout.strip() == "tests: 3 passed, 0 failed, 1 skipped"
    assert "did not finish" in out.stderr
