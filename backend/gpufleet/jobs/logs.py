"""One bounded log file per training: launcher and ranks, stdout and stderr.

The supervisor copies the launcher's combined output into
``<data_dir>/logs/trainings/<id>.log``. When the file passes the size limit
the oldest half is dropped (a marker line says how much), so a chatty
training cannot fill the disk while the newest lines, the useful ones after
a failure, are always there. That marker line also says where in the whole
log the file now goes on from (its ``base``), so the host's shipper
(:mod:`gpufleet.jobs.log_shipper`) knows what it may have missed.
"""

from __future__ import annotations

import os
import re
import signal
import threading
from pathlib import Path
from typing import IO

# Where a training's log file is, and how a read of it goes, are the trainings domain's (the API reads them too).
from gpufleet.trainings.log_store import log_path, read_log

__all__ = ["BoundedLog", "file_base", "log_path", "open_at_base", "pump", "read_log"]

_MARKER = re.compile(rb"^\[gpufleet: \d+ older bytes dropped to keep the log bounded; it goes on from byte (\d+)\]\n")
_MARKER_MAX = 200


def file_base(head: bytes) -> tuple[int, int]:
    """(where in the whole log the file's text begins, the length of its marker line) from its first bytes."""
    m = _MARKER.match(head[:_MARKER_MAX])
    return (int(m.group(1)), m.end()) if m else (0, 0)


def open_at_base(path: Path) -> tuple[IO[bytes], int, int]:
    """The file open at its first byte of log text, that text's place in the whole log, the file's size."""
    fh = open(path, "rb")  # noqa: SIM115 - the caller closes it
    base, header = file_base(fh.read(_MARKER_MAX))
    fh.seek(header)
    return fh, base, os.fstat(fh.fileno()).st_size - header


class BoundedLog:
    def __init__(self, path: Path, max_bytes: int):
        if max_bytes < 1024:
            raise ValueError("max_bytes must be >= 1024")
        self.path = path
        self.max_bytes = max_bytes
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._fh = open(path, "ab")  # noqa: SIM115 - closed in close()
        with open(path, "rb") as fh:
            self._base, self._header = file_base(fh.read(_MARKER_MAX))

    def write(self, data: bytes) -> None:
        with self._lock:
            self._fh.write(data)
            self._fh.flush()
            if self._fh.tell() > self.max_bytes:
                self._shrink()

    def line(self, text: str) -> None:
        self.write((text.rstrip("\n") + "\n").encode())

    def _shrink(self) -> None:
        self._fh.close()
        data = self.path.read_bytes()
        keep = data[-(self.max_bytes // 2):]
        cut = keep.find(b"\n")
        if 0 <= cut < len(keep) - 1:
            keep = keep[cut + 1:]
        dropped = len(data) - len(keep)
        self._base += len(data) - self._header - len(keep)
        marker = f"[gpufleet: {dropped} older bytes dropped to keep the log bounded; it goes on from byte " \
                 f"{self._base}]\n".encode()
        self._header = len(marker)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_bytes(marker + keep)
        os.replace(tmp, self.path)
        self._fh = open(self.path, "ab")  # noqa: SIM115

    def close(self) -> None:
        with self._lock:
            self._fh.close()


def pump(stream: IO[bytes], log: BoundedLog) -> threading.Thread:
    """Copy a pipe into the log on a thread until the pipe closes."""

    def run() -> None:
        for chunk in iter(lambda: stream.readline(65536), b""):
            log.write(chunk)
        stream.close()

    t = threading.Thread(target=run, name="log-pump", daemon=True)
    t.start()
    return t


def launcher_end(code: int, stopped: str | None = None) -> str:
    """The log's last line about a launcher, in words: what its exit means, and who stopped it and why.

    ``stopped`` is why this worker stopped the launcher, when it did (a cancel,
    a lost host, the training ended on the rank-0 host); a bare "-9" would
    read as a crash.
    """
    from gpufleet.engine.exitcodes import ended

    if code == 0 or not stopped:
        return ended(code) + ("" if code >= 0 else ", not by this worker")
    if code > 0:  # it heard the stop and ended on its own terms (a checkpoint on SIGTERM is exit 14)
        return f"{ended(code)}; stopped by this worker ({stopped})"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    return f"ended: stopped by this worker ({stopped}; {name})"
