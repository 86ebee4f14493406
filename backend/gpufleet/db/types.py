"""Column types that behave the same on PostgreSQL and SQLite."""

from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import JSON, DateTime, Integer
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.types import TypeDecorator


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware timestamp.

    PostgreSQL stores ``timestamptz``; SQLite stores text without an offset, so
    values are normalised to UTC on the way in and marked UTC on the way out.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given; gpufleet stores timezone-aware times only")
        value = value.astimezone(timezone.utc)
        if dialect.name == "sqlite":
            return value.replace(tzinfo=None)
        return value

    def process_result_value(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value


# INTEGER[] on PostgreSQL (the seed's column), JSON elsewhere.
IntList = JSON().with_variant(ARRAY(Integer), "postgresql")

# JSONB on PostgreSQL, JSON elsewhere.
JSONDoc = JSON().with_variant(JSONB(), "postgresql")


def utcnow() -> datetime:
    return datetime.now(timezone.utc)
