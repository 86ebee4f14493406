"""Migration 0020 adds the bookings tables with their no-overlap guarantee (PostgreSQL's exclusion constraint,
SQLite's trigger), and a downgrade takes them away again."""

from __future__ import annotations

import pytest
from sqlalchemy import inspect, text

from gpufleet.config import load_settings
from gpufleet.db.session import downgrade_database, get_engine, upgrade_database

BEFORE = "0019_place_options"


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_bookings_migrate_up_and_down(backend, request, tmp_path) -> None:
    url = request.getfixturevalue("fresh_pg_url") if backend == "postgresql" else None
    s = load_settings(data_dir=tmp_path, **({"database_url": url} if url else {}))
    upgrade_database(s, BEFORE)
    upgrade_database(s)
    engine = get_engine(s.effective_database_url)
    assert {"bookings", "booking_gpus"} <= set(inspect(engine).get_table_names())
    with engine.connect() as conn:
        if backend == "postgresql":
            guard = conn.scalar(text("SELECT contype FROM pg_constraint WHERE conname = 'booking_gpus_no_overlap'"))
            assert guard == "x"  # an exclusion constraint
        else:
            names = set(conn.scalars(text("SELECT name FROM sqlite_master WHERE type = 'trigger'")))
            assert {"booking_gpus_no_overlap", "booking_gpus_no_overlap_update"} <= names
    downgrade_database(s, BEFORE)
    assert not {"bookings", "booking_gpus"} & set(inspect(engine).get_table_names())
    upgrade_database(s)  # and up again, from the downgraded schema
    assert "booking_gpus" in set(inspect(engine).get_table_names())
