"""One bounded log file per training: launcher and ranks, stdout and stderr.

The supervisor copies the launcher's combined output into
``<data_dir>/logs/trainings/<id>.log``. When the file passes the size limit
the oldest half is dropped (a marker line says how much), so a chatty
training cannot fill the disk while the newest lines, the useful ones after
a failure, are always there.
"""

from __future__ import annotations

import os
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from gpufleet.config import Settings
from gpufleet.training.logtext import collapse_cr


def log_path(settings: Settings, training_id: uuid.UUID | str) -> Path:
    return settings.logs_dir / "trainings" / f"{training_id}.log"


class BoundedLog:
    def __init__(self, path: Path, max_bytes: int):
        if max_bytes < 1024:
            raise ValueError("max_bytes must be >= 1024")
        self.path = path
        self.max_bytes = max_bytes
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._fh = open(path, "ab")  # noqa: SIM115 - closed in close()

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
        tmp = self.path.with_suffix(".tmp")
        tmp.write_bytes(f"[gpufleet: {dropped} older bytes dropped to keep the log bounded]\n".encode() + keep)
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


@dataclass
class LogChunk:
    offset: int
    next_offset: int
    size: int
    text: str


def read_log(path: Path, offset: int | None = None, tail: int | None = None, limit: int = 256 * 1024) -> LogChunk:
    """Read from ``offset`` (bytes), or the last ``tail`` lines; at most ``limit`` bytes.

    Offsets count the file's bytes; the text has each progress bar's superseded redraws left out.
    """
    if not path.exists():
        return LogChunk(0, 0, 0, "")
    size = path.stat().st_size
    with open(path, "rb") as fh:
        if tail is not None:
            start = max(0, size - limit)
            fh.seek(start)
            data = fh.read()
            lines = data.splitlines(keepends=True)
            if start > 0 and lines:
                lines = lines[1:]  # the first one is cut
            picked = b"".join(lines[-tail:]) if tail > 0 else b""
            return LogChunk(size - len(picked), size, size, collapse_cr(picked.decode(errors="replace")))
        start = min(max(offset or 0, 0), size)
        fh.seek(start)
        data = fh.read(limit)
    # A progress bar's redraws read as its newest state (training/logtext.py).
    return LogChunk(start, start + len(data), size, collapse_cr(data.decode(errors="replace")))
