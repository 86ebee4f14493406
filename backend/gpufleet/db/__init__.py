"""Database: typed models, sessions, migrations."""

from gpufleet.db.models import Base
from gpufleet.db.session import get_engine, session_factory, session_scope, upgrade_database

__all__ = ["Base", "get_engine", "session_factory", "session_scope", "upgrade_database"]
