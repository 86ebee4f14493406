"""A throwaway PostgreSQL database for one benchmark run, migrated to head."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from gpufleet.config import Settings, load_settings
from gpufleet.db.session import get_engine, upgrade_database


@contextmanager
def scratch_settings(server_url: str) -> Iterator[Settings]:
    """Create a fresh database on ``server_url``'s server, yield settings on it, drop it."""
    url = make_url(server_url)
    name = f"gpufleet_bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        settings = load_settings(database_url=url.set(database=name).render_as_string(hide_password=False),
                                 data_dir="/tmp/gpufleet-bench")
        upgrade_database(settings)
        yield settings
    finally:
        get_engine.cache_clear()
        with admin.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
