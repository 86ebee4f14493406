"""A request that was sent and got no answer may have been done: the CLI says so, and how to check.

`gpufleet pools add` against a server that took the request and never
answered (a listener that reads and stays silent) once said "cannot reach the
server ... start it with `gpufleet serve`" although the pool had been added.
Now it says the request may have been done and names the command that shows
whether it was; a read that got no answer says the server did not answer; an
address where nothing listens is still "cannot reach".
"""

from __future__ import annotations

import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.servers import free_port, gpufleet, serve_env


class Silent:
    """A TCP listener on loopback that accepts every connection, reads what is sent, and never answers."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.got: list[bytes] = []
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        while True:
            try:
                data = conn.recv(65536)
            except OSError:
                return
            if not data:
                return
            self.got.append(data)

    def close(self) -> None:
        self.sock.close()
        for c in self.conns:
            c.close()


@pytest.fixture
def silent() -> Iterator[Silent]:
    s = Silent()
    yield s
    s.close()


def _start(data_dir: Path, url: str, *args: str) -> subprocess.Popen:
    env = {**serve_env(data_dir), "GPUFLEET_SERVER": url, "COLUMNS": "300"}
    env.pop("GPUFLEET_UNIX_SOCKET", None)
    return subprocess.Popen([*gpufleet(), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def test_a_sent_request_without_an_answer_may_have_been_done_and_says_how_to_check(tmp_path: Path,
                                                                                 silent: Silent) -> None:
    url = f"http://127.0.0.1:{silent.port}"
    # Both at once: each waits out the client's read timeout.
    add = _start(tmp_path / "data", url, "pools", "add", "slurm", "cluster", "--partition", "gpu")
    ls = _start(tmp_path / "data", url, "pools", "ls")
    nowhere = _start(tmp_path / "data", f"http://127.0.0.1:{free_port()}", "pools", "add", "slurm", "cluster",
                     "--partition", "gpu")
    added, listed, refused = (p.communicate(timeout=180) for p in (add, ls, nowhere))

    assert add.returncode == 2, added
    said = " ".join(added[1].split())  # one line, however the terminal wrapped it
    assert "may have been done" in said and "`gpufleet pools ls`" in said, said
    assert "gpufleet serve" not in said and "cannot reach" not in said, said
    sent = b"".join(silent.got)
    assert b"POST /api/v1/pools" in sent and b'"partition":"gpu"' in sent.replace(b" ", b""), sent[:500]

    # A read did nothing: it says the server did not answer, not that something may have been done.
    assert ls.returncode == 2, listed
    said = " ".join(listed[1].split())
    assert "did not answer" in said and "may have been done" not in said, said

    # Nothing listening: nothing was sent, the server is not there.
    assert nowhere.returncode == 2, refused
    said = " ".join(refused[1].split())
    assert "cannot reach the server" in said and "gpufleet serve" in said and "may have been done" not in said, said
