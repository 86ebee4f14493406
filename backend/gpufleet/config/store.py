"""Section ``store``: where a process keeps its state — the data directory, the database and Redis."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, Field, field_validator


def _default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "gpufleet"


class StoreSettings(BaseModel):
    # Where the embedded database, logs, checkpoints and the simulated fleet's state live.
    data_dir: Path = Field(default_factory=_default_data_dir)
    database_url: str | None = None
    redis_url: str | None = None
    # Connections per process (PostgreSQL): the pool, what it may open beyond
    # it, and how long a background job waits for one.
    db_pool_size: int = Field(default=10, ge=1, le=1000)
    db_max_overflow: int = Field(default=20, ge=0, le=1000)
    db_pool_timeout_s: float = Field(default=30.0, gt=0, le=600)
    # How long a CLI write waits for SQLite's write lock before it says the database is busy.
    cli_busy_timeout_s: float = Field(default=10.0, gt=0, le=600)

    @field_validator("database_url")
    @classmethod
    def _check_db_url(cls, v: str | None) -> str | None:
        if v is None or v == "":
            return None
        if not (v.startswith("sqlite") or v.startswith("postgresql")):
            raise ValueError("must start with sqlite:// or postgresql:// (postgresql+psycopg://)")
        return v

    @field_validator("redis_url")
    @classmethod
    def _check_redis_url(cls, v: str | None) -> str | None:
        if v is None or v == "":
            return None
        if not (v.startswith("redis://") or v.startswith("rediss://") or v.startswith("unix://")):
            raise ValueError("must start with redis://, rediss:// or unix://")
        return v

    @property
    def effective_database_url(self) -> str:
        """The database URL, with the embedded SQLite file as the default."""
        if self.database_url:
            url = self.database_url
            # psycopg 3 is the driver; accept the bare scheme people paste.
            if url.startswith("postgresql://"):
                url = "postgresql+psycopg://" + url[len("postgresql://"):]
            return url
        return f"sqlite:///{self.data_dir / 'gpufleet.db'}"

    @property
    def is_embedded(self) -> bool:
        """True when no external service is configured (SQLite and no Redis)."""
        return self.database_url is None and self.redis_url is None

    @property
    def is_sqlite(self) -> bool:
        return self.effective_database_url.startswith("sqlite")

    @property
    def logs_dir(self) -> Path:
        return self.data_dir / "logs"

    @property
    def sim_state_dir(self) -> Path:
        return self.data_dir / "sim"
