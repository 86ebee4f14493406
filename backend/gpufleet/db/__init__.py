"""Database: typed models, sessions, migrations.

Importing the package loads nothing: ``gpufleet.db.statuses`` is read by the
client, which must not load SQLAlchemy (the names below load on first use).
"""

from typing import Any

__all__ = ["Base", "get_engine", "session_factory", "session_scope", "upgrade_database"]


def __getattr__(name: str) -> Any:
    if name == "Base":
        from gpufleet.db.models import Base

        return Base
    if name in ("get_engine", "session_factory", "session_scope", "upgrade_database"):
        from gpufleet.db import session

        return getattr(session, name)
    raise AttributeError(f"module 'gpufleet.db' has no attribute {name!r}")
