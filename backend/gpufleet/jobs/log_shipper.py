"""Every training's log reaches the database from the host that writes it.

Each host's worker runs one shipper: it reads the trainings' log files under
its own data dir from where it last got to (a ``.shipped`` file beside each
log keeps that offset) and sends what follows as pieces
(:mod:`gpufleet.trainings.log_store`): at most ``log_chunk_bytes`` a row,
one transaction per file per pass, a pass every ``log_ship_interval_s``.
Only whole lines are sent, so every line of a gang's other hosts carries
its ``[host NAME]`` prefix. While the database is away nothing is lost: the
file and the offset stay, and the next pass that reaches it sends the rest.
A log closed at the end of an attempt is sent at once, before the attempt
is recorded as over, so a reader following it sees its end.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from pathlib import Path

from gpufleet.config import Settings
from gpufleet.db.session import write_session
from gpufleet.jobs.logs import BoundedLog, log_path, open_at_base
from gpufleet.trainings import log_store
from gpufleet.trainings.log_store import Piece

log = logging.getLogger(__name__)

PASS_MAX = 4 * 1024 * 1024  # bytes read from one file in one pass
_SHIPPERS: dict[Path, LogShipper] = {}
_SHIPPERS_LOCK = threading.Lock()


def identify(name: str, host_name: str) -> tuple[uuid.UUID, str, bytes] | None:
    """(training, source, line prefix) of a log file's name; None for files that are no training's log."""
    if not name.endswith(".log") or len(name) < 40:
        return None
    try:
        tid = uuid.UUID(name[:36])
    except ValueError:
        return None
    rest = name[36:-4]
    if rest and not rest.startswith("-"):
        return None
    prefix = f"[host {rest[1:]}] ".encode() if rest else b""  # another host's ranks of a gang
    return tid, f"{host_name}/{name}"[:300], prefix


def split(data: bytes, start: int, size: int, prefix: bytes) -> list[Piece]:
    """``data`` (bytes from ``start`` of a file) as pieces of at most about ``size`` bytes, cut at line ends."""
    out, i = [], 0
    while i < len(data):
        j = min(len(data), i + size)
        if j < len(data) and (k := data.rfind(b"\n", i, j)) >= i:
            j = k + 1
        part = data[i:j]
        if prefix:
            part = prefix + part.replace(b"\n", b"\n" + prefix)
            if part.endswith(b"\n" + prefix):
                part = part[:-len(prefix)]
        out.append(Piece(start + i, start + j, part))
        i = j
    return out


class LogShipper:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.dir = settings.logs_dir / "trainings"
        self._lock = threading.Lock()
        self._done: dict[str, tuple[int, int]] = {}  # file -> (size, mtime) when all of it was sent

    def ship_all(self) -> bool:
        """One pass over every log file; True when some file has more to send at once."""
        more = False
        if not self.dir.is_dir():
            return False
        for entry in os.scandir(self.dir):
            if entry.name.endswith(".log") and entry.is_file():
                st = entry.stat()
                if self._done.get(entry.name) != (st.st_size, st.st_mtime_ns):
                    more |= self.ship_file(Path(entry.path))
        return more

    def ship_file(self, path: Path) -> bool:
        with self._lock:
            return self._ship(path)

    def _ship(self, path: Path) -> bool:
        ident = identify(path.name, self.settings.host_name)
        if ident is None:
            self._done[path.name] = _stamp(path)
            return False
        tid, source, prefix = ident
        offset = _read_offset(path)
        fh, base, length = open_at_base(path)
        with fh:
            stamp = _stamp(path, fh)
            end = base + length
            pieces: list[Piece] = []
            if offset < base:  # dropped from the file while the database was away
                note = f"[gpufleet: {base - offset} bytes of this log on {self.settings.host_name} were dropped " \
                       f"before they could be sent]\n".encode()
                pieces.append(Piece(offset, base, note))
                offset = base
            fh.seek(offset - base, os.SEEK_CUR)
            data = fh.read(PASS_MAX)
        if len(data) < self.settings.log_chunk_bytes:
            data = data[:data.rfind(b"\n") + 1]  # a line still being written waits for its end
        pieces += split(data, offset, self.settings.log_chunk_bytes, prefix)
        if not pieces:
            self._done[path.name] = stamp
            return False
        with write_session(self.settings) as sess:
            shipped = log_store.append(sess, tid, source, pieces, self.settings.log_max_bytes)
        shipped = end if shipped is None else shipped  # the training is gone: nothing of it to send
        _write_offset(path, shipped)
        if shipped >= end:
            self._done[path.name] = stamp
        return shipped < end and shipped == pieces[-1].source_end


def _stamp(path: Path, fh: object | None = None) -> tuple[int, int]:
    st = os.fstat(fh.fileno()) if fh is not None else path.stat()  # type: ignore[attr-defined]
    return st.st_size, st.st_mtime_ns


def _offset_path(path: Path) -> Path:
    return path.with_name(path.name + ".shipped")


def _read_offset(path: Path) -> int:
    try:
        return int(_offset_path(path).read_text())
    except (FileNotFoundError, ValueError):
        return 0


def _write_offset(path: Path, offset: int) -> None:
    tmp = path.with_name(path.name + ".shipped.tmp")
    tmp.write_text(str(offset))
    os.replace(tmp, _offset_path(path))


def shipper_for(settings: Settings) -> LogShipper:
    with _SHIPPERS_LOCK:
        return _SHIPPERS.setdefault(settings.logs_dir, LogShipper(settings))


def flush(settings: Settings, path: Path) -> None:
    """Send what ``path`` holds now; on failure the shipper's passes send it later."""
    try:
        while shipper_for(settings).ship_file(path):
            pass
    except Exception as exc:  # noqa: BLE001 - the database may be away; the file and its offset stay
        log.warning("the log %s could not be sent yet (%s); it will be sent when the database answers", path, exc)


class ShippedLog(BoundedLog):
    """A training's log file on this host, sent to the database as a whole when closed."""

    def __init__(self, settings: Settings, name: uuid.UUID | str):
        super().__init__(log_path(settings, name), settings.log_max_bytes)
        self._settings = settings

    def close(self) -> None:
        super().close()
        flush(self._settings, self.path)


def start_shipper(settings: Settings, stop: threading.Event) -> threading.Thread:
    """The host's shipping passes on a thread until ``stop`` is set (one last pass then)."""
    shipper = shipper_for(settings)

    def run() -> None:
        failing = False
        while True:
            more = False
            try:
                more = shipper.ship_all()
                if failing:
                    log.warning("training logs are being sent again")
                failing = False
            except Exception:  # the database may be away; say so once
                if not failing:
                    log.warning("cannot send training logs to the database; retrying", exc_info=True)
                failing = True
            if stop.is_set():
                return
            stop.wait(0 if more else settings.log_ship_interval_s)

    t = threading.Thread(target=run, name="gpufleet-log-shipper", daemon=True)
    t.start()
    return t
