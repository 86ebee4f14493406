"""A progress file is the training's account's, so what it says is input: a line the database could not hold is
skipped with one warning, never left to fail every later write. A write the database refuses is not an outage
(waiting changes nothing): the worker stops the ranks itself and names why, where before the lease lapsed into
"the host is lost" (gpufleet.jobs.watch, gpufleet.jobs.supervisor)."""

from __future__ import annotations

import json
import uuid
from types import SimpleNamespace

import pytest
from gpufleet.db.models import Training, TrainingEvent, TrainingMetric
from gpufleet.db.session import session_scope, write_session
from gpufleet.jobs.metrics_sink import MetricsSink
from gpufleet.jobs.supervisor import _sink_failed
from gpufleet.jobs.watch import unreachable
from sqlalchemy import create_engine, select, text
from sqlalchemy.exc import DBAPIError


def _running(settings) -> Training:
    tid = uuid.uuid4()
    with session_scope(settings) as sess:
        sess.add(Training(id=tid, name=f"sink-{tid.hex[:6]}", owner="alice", recipe="script", config={},
                          status="running", attempt=1, lease_owner="worker-1"))
    with session_scope(settings) as sess:
        t = sess.get(Training, tid)
        sess.expunge(t)
    return t


def test_lines_the_database_could_not_hold_are_skipped_once_with_a_warning(db_settings, tmp_path):
    t = _running(db_settings)
    progress = tmp_path / "progress-1.jsonl"
    lines = [{"type": "step", "step": 1, "loss": 0.5},
             {"type": "step", "step": 2**40, "loss": 0.4},       # past the 32-bit column
             {"type": "step", "step": 3, "loss": "not a number"},
             {"type": "step", "step": 4, "loss": 0.25}]
    progress.write_text("".join(json.dumps(x) + "\n" for x in lines))
    sink = MetricsSink(db_settings, t, "worker-1", progress, "h")
    assert sink.pump(final=True) == "ok"
    with session_scope(db_settings) as sess:
        steps = sess.execute(select(TrainingMetric.step, TrainingMetric.loss)
                             .where(TrainingMetric.training_id == t.id).order_by(TrainingMetric.step)).all()
        row = sess.get(Training, t.id)
        warnings = sess.execute(select(TrainingEvent.reason).where(
            TrainingEvent.training_id == t.id, TrainingEvent.kind == "warning")).scalars().all()
    assert [tuple(s) for s in steps] == [(1, 0.5), (4, 0.25)]
    assert (row.step, row.last_loss) == (4, 0.25)
    assert len(warnings) == 1 and "a progress line was skipped" in warnings[0], warnings
    assert "outside 0..2147483647" in warnings[0]


@pytest.mark.postgres
def test_a_refused_write_is_not_an_outage_and_a_closed_port_is(db_settings):
    if not (db_settings.database_url or "").startswith("postgresql"):
        pytest.skip("the refusal is PostgreSQL's: SQLite stores any integer")
    refused = None
    try:
        with write_session(db_settings) as sess:
            sess.execute(text("SELECT CAST(:big AS integer)"), {"big": 2**40})
    except DBAPIError as exc:
        refused = exc
    assert refused is not None and not unreachable(refused), refused
    away = None
    engine = create_engine("postgresql+psycopg://nobody@127.0.0.1:9/none", connect_args={"connect_timeout": 3})
    try:
        with engine.connect():
            pass
    except DBAPIError as exc:
        away = exc
    finally:
        engine.dispose()
    assert away is not None and unreachable(away), away
    assert not unreachable(RuntimeError("a fault of the worker's own"))


def test_a_worker_that_cannot_record_progress_restarts_the_training_naming_why_then_fails_it():
    watch = SimpleNamespace(host_name="gpu-3", sink_failure="DataError: integer out of range")
    first = _sink_failed(SimpleNamespace(restarts=0, max_restarts=2), watch)
    assert (first.status, first.counts_restart, first.retry_kind) == ("queued", True, "failure")
    assert "the worker on host gpu-3 could not record the training's progress (DataError" in first.reason
    assert "lease" not in first.reason and "lost" not in first.reason
    last = _sink_failed(SimpleNamespace(restarts=2, max_restarts=2), watch)
    assert last.status == "failed" and "no restarts are left (max_restarts 2)" in last.reason
