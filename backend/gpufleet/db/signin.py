"""Tables for signing in: the dashboard's browser sessions.

Part of the one data model (:mod:`gpufleet.db.models`, which imports them), kept
in their own module to keep that one readable.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import ForeignKey, String, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from gpufleet.db.base import Base
from gpufleet.db.types import UTCDateTime, utcnow


class BrowserSession(Base):
    """One signed-in browser: its cookie counts only while this row is live.

    The cookie carries the row's id and a random key whose SHA-256 is kept
    here, so neither the server's secret alone nor the database alone makes
    a working cookie. Signing out, ``gpufleet secret rotate``, revoking the
    token it was opened with and disabling the user each end it at once.
    """

    __tablename__ = "browser_sessions"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    # The API token it was opened with; None when opened another way (a one-time link).
    token_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("api_tokens.id", ondelete="CASCADE"), index=True)
    key_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
