"""The CLI talks only to the real server: a socket planted by another account is refused, and nothing is sent.

Two real Unix accounts (`useradd`; the tests run as root): the attacker makes
``/tmp/gpufleet-<victim uid>/`` and listens there with a fake server that
records every byte it gets and answers like gpufleet. The victim's CLI, run
as the victim without ``XDG_RUNTIME_DIR`` (as under `su`, `runuser`, cron),
must refuse it with an error that names the socket and its owner, and the
fake must receive nothing. A socket named outright (``GPUFLEET_UNIX_SOCKET``)
whose listener is another account is refused at connection, from its peer
credentials. And `session shell` takes only the GPU and session variables
from whatever answers.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from socketserver import ThreadingUnixStreamServer

import pytest

from support.accounts import Account, run_as, unix_accounts
from support.servers import gpufleet

# A root server of this machine (another test's, say) listens there, and would rightly be asked first.
SHARED = (Path("/run/gpufleet"),)
WHOAMI = b'{"name":"victim","role":"admin","via":"socket","auth_required":true}'
ANSWER = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
          % (len(WHOAMI), WHOAMI))


@contextmanager
def fake_server_as(account: Account, path: Path, folder_mode: int = 0o777) -> Iterator[list[bytes]]:
    """A fake gpufleet server listening at ``path`` as ``account`` (it makes the folder); yields what it got.

    A forked child takes the account's uid before it binds and listens, so the kernel's peer
    credentials of the socket are the account's, as for a server that account started itself.
    """
    got: list[bytes] = []
    ready_r, ready_w = os.pipe()
    data_r, data_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the attacker's process: raw system calls only, then _exit
        try:
            os.setgroups([])
            os.setgid(_gid(account))
            os.setuid(account.uid)
            os.makedirs(path.parent, exist_ok=True)
            os.chmod(path.parent, folder_mode)
            srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            srv.bind(str(path))
            os.chmod(path, 0o777)
            srv.listen(16)
            os.write(ready_w, b"1")
            while True:
                conn, _ = srv.accept()
                conn.settimeout(5)
                try:
                    chunk = conn.recv(65536)
                    os.write(data_w, len(chunk).to_bytes(4, "big") + chunk)
                    if chunk:
                        conn.sendall(ANSWER)
                except OSError:
                    os.write(data_w, (0).to_bytes(4, "big"))
                conn.close()
        finally:
            os._exit(0)
    os.close(ready_w)
    os.close(data_w)
    try:
        assert os.read(ready_r, 1) == b"1", "the fake server did not start"
        yield got
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        raw = b""
        while chunk := os.read(data_r, 65536):
            raw += chunk
        while raw:
            n = int.from_bytes(raw[:4], "big")
            got.append(raw[4:4 + n])
            raw = raw[4 + n:]
        os.close(ready_r)
        os.close(data_r)
        shutil.rmtree(path.parent, ignore_errors=True)


def _gid(account: Account) -> int:
    import pwd

    return pwd.getpwnam(account.name).pw_gid


def test_a_socket_planted_in_the_victims_tmp_folder_is_refused_and_gets_nothing() -> None:
    with unix_accounts(2) as (victim, attacker):
        planted = Path(f"/tmp/gpufleet-{victim.uid}/gpufleet.sock")
        with fake_server_as(attacker, planted) as got:
            # No GPUFLEET_UNIX_SOCKET, no XDG_RUNTIME_DIR: the CLI looks where a server of the victim's would be.
            r = run_as(victim, "whoami", hide=SHARED)
            # Her code and a key: what the fake would have kept.
            code_dir = victim.home / "project"
            code_dir.mkdir()
            (code_dir / "train.py").write_text("print('private code')\n")
            shutil.chown(code_dir, victim.name)
            shutil.chown(code_dir / "train.py", victim.name)
            code = run_as(victim, "run", "--dir", str(code_dir), "--no-follow", "--env", "WANDB_API_KEY=sk-victim",
                          "--", "python", "train.py", hide=SHARED)
        assert r.returncode != 0, r.stdout
        assert f"refusing the server socket {planted}" in r.stderr and attacker.name in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
        assert code.returncode != 0 and "refusing the server socket" in code.stderr, code.stderr
        # Not one byte reached the fake (not even a connection was made).
        assert got == [], got


def test_a_named_socket_whose_listener_is_another_account_gets_nothing() -> None:
    with unix_accounts(2) as (victim, attacker):
        shared = Path(tempfile.mkdtemp(prefix="gpufleet-shared-", dir="/tmp"))
        shared.chmod(0o777)
        path = shared / "inner" / "gpufleet.sock"
        try:
            with fake_server_as(attacker, path) as got:
                r = run_as(victim, "whoami", env={"GPUFLEET_UNIX_SOCKET": str(path)})
        finally:
            shutil.rmtree(shared, ignore_errors=True)
        assert r.returncode != 0, r.stdout
        assert "the process listening on it runs as" in r.stderr and attacker.name in r.stderr, r.stderr
        # The connection was made (that is how the listener is known), and closed before any request.
        assert got and all(chunk == b"" for chunk in got), got


def test_a_personal_folder_open_to_others_is_refused_even_when_it_is_ones_own() -> None:
    with unix_accounts(1) as (victim,):
        planted = Path(f"/tmp/gpufleet-{victim.uid}/gpufleet.sock")
        with fake_server_as(victim, planted, folder_mode=0o755) as got:
            r = run_as(victim, "whoami", hide=SHARED)
        assert r.returncode != 0 and "open to other accounts (mode 0755, not 0700)" in r.stderr, r.stderr
        assert got == []


class _ShellTarget(BaseHTTPRequestHandler):
    """Answers `session shell` as a hostile server would: the GPU, and a PATH and start-up files of its own."""

    def do_POST(self) -> None:  # http.server's name
        sid = self.path.split("/")[-2]
        body = json.dumps({"id": sid, "host": "sim-host", "account": "x", "ssh": "ssh x", "env": {
            "CUDA_VISIBLE_DEVICES": "3", "GPUFLEET_SESSION_ID": sid, "PATH": "/tmp/evil-bin",
            "BASH_ENV": "/tmp/evil.sh", "ENV": "/tmp/evil.sh", "LD_PRELOAD": "/tmp/evil.so",
            "PROMPT_COMMAND": "curl evil", "PYTHONPATH": "/tmp/evil", "GPUFLEET_SERVER": "http://evil"}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_session_shell_takes_only_the_gpu_and_session_variables(tmp_path: Path) -> None:
    path = tmp_path / "gpufleet.sock"
    srv = ThreadingUnixStreamServer(str(path), _ShellTarget)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    sid = str(uuid.uuid4())
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    env.update(GPUFLEET_UNIX_SOCKET=str(path), GPUFLEET_HOST_NAME="sim-host", PATH="/usr/bin:/bin")
    env.pop("BASH_ENV", None)
    try:
        r = subprocess.run([*gpufleet(), "session", "shell", sid, "--", "sh", "-c",
                            'echo "$CUDA_VISIBLE_DEVICES|$GPUFLEET_SESSION_ID|$PATH|$BASH_ENV|$ENV|$LD_PRELOAD|'
                            '$PROMPT_COMMAND|$PYTHONPATH|$GPUFLEET_SERVER"'],
                           env=env, capture_output=True, text=True, timeout=60, check=False)
    finally:
        srv.shutdown()
        srv.server_close()
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"3|{sid}|/usr/bin:/bin||||||", r.stdout
    assert "BASH_ENV" in r.stderr and "takes only its GPU and session variables" in r.stderr


@pytest.fixture(autouse=True)
def _no_developer_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    # The CLI run as the victim inherits this environment: it must look where it would by itself.
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.delenv("GPUFLEET_UNIX_SOCKET", raising=False)
