"""A training's log as the API serves it: the pieces every host shipped, in one stream.

Hosts ship their log files (:mod:`gpufleet.jobs.log_shipper`) as pieces;
each piece is placed after everything the training's log holds so far, so
the stream's byte offsets grow the same for every reader wherever the
pieces were written. The newest ``keep_bytes`` of a training's stream are
kept (older pieces are dropped, as a host's log file drops its oldest
half); the rest goes with the training's record.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import case, delete, func, insert, select, text
from sqlalchemy.orm import Session

from gpufleet.config import StoreSettings
from gpufleet.db.logchunks import TrainingLogChunk as Chunk
from gpufleet.db.models import Training
from gpufleet.engine.logtext import collapse_cr

READ_LIMIT = 256 * 1024
_LOCK_CLASS = 0x6C6F6773  # pg_advisory_xact_lock(class, key): one training's log at a time


@dataclass
class LogChunk:
    offset: int
    next_offset: int
    size: int
    text: str


@dataclass
class Piece:
    """Bytes ``source_start``..``source_end`` of a host's log file, as they enter the stream."""

    source_start: int
    source_end: int
    data: bytes


def from_offset(data: bytes, start: int, size: int) -> LogChunk:
    """``data``, the log's bytes from ``start``, as one read (redraws collapsed, engine/logtext.py)."""
    return LogChunk(start, start + len(data), size, collapse_cr(data.decode(errors="replace")))


def last_lines(data: bytes, start: int, size: int, tail: int) -> LogChunk:
    """The last ``tail`` lines of ``data``, the log's bytes from ``start`` to its end ``size``."""
    lines = data.splitlines(keepends=True)
    if start > 0 and lines:
        lines = lines[1:]  # the first one is cut
    picked = b"".join(lines[-tail:]) if tail > 0 else b""
    return LogChunk(size - len(picked), size, size, collapse_cr(picked.decode(errors="replace")))


def read(session: Session, training_id: uuid.UUID, offset: int | None = None, tail: int | None = None,
         limit: int = READ_LIMIT) -> LogChunk | None:
    """From byte ``offset``, or the last ``tail`` lines; None while no host has shipped any of it."""
    size = session.scalar(select(func.max(Chunk.stop)).where(Chunk.training_id == training_id))
    if size is None:
        return None
    lo = max(0, size - limit) if tail is not None else min(max(offset or 0, 0), size)
    hi = size if tail is not None else lo + limit
    rows = session.execute(select(Chunk.start, Chunk.data).where(
        Chunk.training_id == training_id, Chunk.stop > lo, Chunk.start < hi).order_by(Chunk.start)).all()
    first = rows[0].start if rows else lo
    begin = max(lo, first)  # pieces before `first` were dropped to keep the log bounded
    data = b"".join(r.data for r in rows)[begin - first:hi - first]
    return last_lines(data, begin, size, tail) if tail is not None else from_offset(data, begin, size)


def read_log(path: Path, offset: int | None = None, tail: int | None = None, limit: int = READ_LIMIT) -> LogChunk:
    """This machine's file of a log: from ``offset`` (bytes), or the last ``tail`` lines; at most ``limit`` bytes.

    Offsets count the file's bytes; the text has each progress bar's superseded redraws left out.
    """
    if not path.exists():
        return LogChunk(0, 0, 0, "")
    size = path.stat().st_size
    with open(path, "rb") as fh:
        if tail is not None:
            start = max(0, size - limit)
            fh.seek(start)
            return last_lines(fh.read(), start, size, tail)
        start = min(max(offset or 0, 0), size)
        fh.seek(start)
        return from_offset(fh.read(limit), start, size)


def log_path(settings: StoreSettings, training_id: uuid.UUID | str) -> Path:
    """This machine's file of a training's log (gpufleet.jobs.logs writes it)."""
    return settings.logs_dir / "trainings" / f"{training_id}.log"


def read_training_log(session: Session, settings: StoreSettings, training_id: uuid.UUID, offset: int | None = None,
                      tail: int | None = None) -> LogChunk:
    """What the training's hosts shipped; a log no host shipped yet may be this machine's own file."""
    return read(session, training_id, offset=offset, tail=tail) \
        or read_log(log_path(settings, training_id), offset=offset, tail=tail)


def append(session: Session, training_id: uuid.UUID, source: str, pieces: list[Piece],
           keep_bytes: int) -> int | None:
    """Add ``source``'s pieces after the stream's end; returns how far into ``source`` the log now reaches.

    Pieces must continue where ``source`` stopped; any that do not are left
    out, and the answer tells the host where to go on from. None when the
    training is gone (its log goes with it).
    """
    if session.get_bind().dialect.name == "postgresql":
        key = int.from_bytes(training_id.bytes[:4], "big", signed=True)
        session.execute(text("SELECT pg_advisory_xact_lock(:c, :k)"), {"c": _LOCK_CLASS, "k": key})
    if session.scalar(select(Training.id).where(Training.id == training_id)) is None:
        return None
    ends = session.execute(select(
        func.max(Chunk.stop), func.max(case((Chunk.source == source, Chunk.source_end)))
    ).where(Chunk.training_id == training_id)).one()
    end, shipped = ends[0] or 0, ends[1] or 0
    rows = []
    for p in pieces:
        if p.source_start != shipped or not p.data:
            break
        rows.append(dict(training_id=training_id, source=source, source_end=p.source_end, start=end,
                         stop=end + len(p.data), data=p.data))
        end, shipped = end + len(p.data), p.source_end
    if rows:
        session.execute(insert(Chunk), rows)
        if end > keep_bytes:
            session.execute(delete(Chunk).where(Chunk.training_id == training_id, Chunk.stop <= end - keep_bytes))
    return shipped
