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


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_booking_events_migrate_keeping_the_deliveries_owed(backend, request, tmp_path) -> None:
    # 0023 lets a delivery be of a booking's event: on SQLite by copying webhook_deliveries, whose rows must
    # come through, owed as before; after it a delivery names exactly one event.
    from sqlalchemy.exc import IntegrityError

    from gpufleet.db.models import TrainingEvent
    from gpufleet.db.notify import Webhook
    from gpufleet.db.session import session_scope
    from gpufleet.lifecycle.models import new_training

    url = request.getfixturevalue("fresh_pg_url") if backend == "postgresql" else None
    s = load_settings(data_dir=tmp_path, **({"database_url": url} if url else {}))
    upgrade_database(s, "0022_booking_limits")
    with session_scope(s) as sess:  # tables 0023 leaves as they are
        hook = Webhook(owner="dana", url="https://hooks.example.com/x", format="json", events=["training_failed"],
                       secret="whsec_test")
        t = new_training(kind="recipe", recipe="mlp", owner="dana", name="t", world_size=1, priority=0,
                         preemptible=False)
        sess.add_all([hook, t])
        sess.flush()
        ev = TrainingEvent(training_id=t.id, seq=1, kind="status", status="failed")
        sess.add(ev)
        sess.flush()
        hook_id, event_id = hook.id, ev.id
    engine = get_engine(s.effective_database_url)
    hook_key = hook_id.hex if backend == "sqlite" else str(hook_id)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO webhook_deliveries (webhook_id, event_id, event, attempts, next_at, "
                          "created_at) VALUES (:h, :e, 'training_failed', 3, :t, :t)"),
                     {"h": hook_key, "e": event_id, "t": "2026-12-01 10:00:00"})
    upgrade_database(s)
    with engine.connect() as conn:
        kept = conn.execute(text("SELECT event_id, booking_event_id, attempts FROM webhook_deliveries")).all()
    assert [tuple(r) for r in kept] == [(event_id, None, 3)]
    with pytest.raises(IntegrityError), engine.begin() as conn:  # of no event at all: refused
        conn.execute(text("INSERT INTO webhook_deliveries (webhook_id, event, attempts, next_at, created_at) "
                          "VALUES (:h, 'training_failed', 0, :t, :t)"), {"h": hook_key, "t": "2026-12-01 10:00:00"})
    downgrade_database(s, "0022_booking_limits")
    assert "booking_events" not in set(inspect(engine).get_table_names())
    with engine.connect() as conn:
        assert conn.scalar(text("SELECT count(*) FROM webhook_deliveries")) == 1
