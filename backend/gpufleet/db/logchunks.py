"""A training's log in the database: the output every host shipped, in order.

Part of the one data model (:mod:`gpufleet.db.models` imports it). Each row is
a piece of one host's log file (``source``), placed at ``start``..``stop`` in
the training's one log stream, the byte offsets the logs API speaks in.
``source_end`` is how far into the host's file the piece reaches, so a host
that shipped a piece but never heard back sends only what follows it.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import BigInteger, ForeignKey, Index, Integer, LargeBinary, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from gpufleet.db.base import Base
from gpufleet.db.types import UTCDateTime, utcnow


class TrainingLogChunk(Base):
    __tablename__ = "training_log_chunks"
    __table_args__ = (
        UniqueConstraint("training_id", "source", "source_end"),
        Index("ix_training_log_chunks_stream", "training_id", "start"),
    )

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    training_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("trainings.id", ondelete="CASCADE"))
    source: Mapped[str] = mapped_column(String(300))
    source_end: Mapped[int] = mapped_column(BigInteger)
    start: Mapped[int] = mapped_column(BigInteger)
    stop: Mapped[int] = mapped_column(BigInteger)
    data: Mapped[bytes] = mapped_column(LargeBinary)
    time: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
