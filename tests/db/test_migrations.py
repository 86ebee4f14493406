"""The initial migration builds the schema on PostgreSQL and SQLite, and matches the models."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, text

from gpufleet.config import load_settings
from gpufleet.db.models import Base
from gpufleet.db.session import (
    current_revision,
    downgrade_database,
    get_engine,
    head_revision,
    upgrade_database,
)


def _drift(url: str) -> list:
    engine = get_engine(url)
    with engine.connect() as conn:
        ctx = MigrationContext.configure(
            conn,
            opts={
                "compare_type": True,
                "include_object": lambda o, n, t, r, c: not (
                    t == "table" and r and c is None and n.startswith("gpu_metrics_history_")
                ),
            },
        )
        return compare_metadata(ctx, Base.metadata)


@pytest.mark.postgres
def test_upgrade_downgrade_upgrade_on_postgresql_without_drift(fresh_pg_url: str, tmp_path) -> None:
    s = load_settings(database_url=fresh_pg_url, data_dir=tmp_path)
    upgrade_database(s)
    assert current_revision(s) == head_revision()
    downgrade_database(s, "base")
    assert current_revision(s) is None
    tables = set(inspect(get_engine(s.effective_database_url)).get_table_names())
    assert tables <= {"alembic_version"}, f"downgrade left tables behind: {tables}"
    upgrade_database(s)
    assert current_revision(s) == head_revision()
    assert _drift(s.effective_database_url) == []


@pytest.mark.postgres
def test_postgresql_schema_has_the_seed_columns(pg_migrated_url: str) -> None:
    engine = get_engine(pg_migrated_url)
    with engine.connect() as conn:
        cols = {
            r.column_name: (r.data_type, r.column_default)
            for r in conn.execute(
                text(
                    "SELECT column_name, data_type, column_default FROM information_schema.columns "
                    "WHERE table_name = 'trainings'"
                )
            )
        }
        assert cols["gpu_ids"][0] == "ARRAY"
        assert cols["distributed"][0] == "boolean" and cols["distributed"][1] == "false"
        assert cols["world_size"][0] == "integer" and cols["world_size"][1] == "1"
        # gpu_metrics_history is partitioned, with a default partition.
        kind = conn.scalar(text("SELECT relkind FROM pg_class WHERE relname = 'gpu_metrics_history'"))
        assert kind == "p"
        assert conn.scalar(
            text("SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                 "WHERE c.relname = 'gpu_metrics_history_default'")
        ) == 1
        idx = {r[0] for r in conn.execute(
            text("SELECT indexname FROM pg_indexes WHERE tablename = 'gpu_metrics_history'"))}
        assert {"idx_gpu_metrics_time", "idx_gpu_metrics_gpu"} <= idx
        ts_type = conn.scalar(text(
            "SELECT data_type FROM information_schema.columns"
            " WHERE table_name='gpu_metrics_history' AND column_name='timestamp'"
        ))
        assert ts_type == "timestamp with time zone"


def test_sqlite_upgrade_downgrade_upgrade(tmp_path) -> None:
    s = load_settings(data_dir=tmp_path)
    upgrade_database(s)
    downgrade_database(s, "base")
    upgrade_database(s)
    tables = set(inspect(get_engine(s.effective_database_url)).get_table_names())
    assert {t.name for t in Base.metadata.sorted_tables} <= tables
    assert current_revision(s) == head_revision()
