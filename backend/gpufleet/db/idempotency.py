"""The idempotency keys of creates: what a retried ``POST`` with the same ``Idempotency-Key`` gets back.

Part of the one data model (:mod:`gpufleet.db.models`, which imports it).
One row per (user, endpoint, key): the request's fingerprint, and once it
succeeded, its status and body (:mod:`gpufleet.api.idempotency`).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import Integer, String, UniqueConstraint, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from gpufleet.db.base import Base
from gpufleet.db.types import JSONDoc, UTCDateTime, utcnow


class IdempotencyKey(Base):
    __tablename__ = "idempotency_keys"
    __table_args__ = (UniqueConstraint("owner", "endpoint", "key"),)

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    owner: Mapped[str] = mapped_column(String(64))  # the user, by name: keys of two users never meet
    endpoint: Mapped[str] = mapped_column(String(128))  # e.g. "POST /api/v1/trainings"
    key: Mapped[str] = mapped_column(String(255))
    fingerprint: Mapped[str] = mapped_column(String(64))  # SHA-256 of the request body, JSON made canonical
    status_code: Mapped[int | None] = mapped_column(Integer)  # None while the first request runs
    response: Mapped[Any | None] = mapped_column(JSONDoc)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
