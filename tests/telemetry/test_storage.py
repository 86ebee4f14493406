"""History storage: batches, the bounded buffer, partitions, rollups, expiry, downsampled queries."""

from __future__ import annotations

import uuid
from datetime import date, datetime, timedelta, timezone

import pytest
from sqlalchemy import func, select, text

from gpufleet.config import load_settings
from gpufleet.db.models import GPUMetricsHistory, GPUMetricsRollup
from gpufleet.db.session import get_engine, session_scope
from gpufleet.telemetry import retention
from gpufleet.telemetry.history import GPURef, HistoryError, HistoryQuery, query_history
from gpufleet.telemetry.storage import MetricsWriter

from .helpers import make_host, make_samples


def _rows(settings, host_id):
    with session_scope(settings) as sess:
        return sess.scalars(
            select(GPUMetricsHistory).where(GPUMetricsHistory.host_id == host_id).order_by(
                GPUMetricsHistory.timestamp, GPUMetricsHistory.gpu_index)
        ).all()


def test_writer_stores_one_row_per_gpu_per_sample_with_the_training(db_settings):
    host_id, host = make_host(db_settings)
    tid = uuid.uuid4()
    start = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
    w = MetricsWriter(db_settings, host_id, batch_size=7)
    w.add(make_samples(host, start, gpus=2, seconds=10, training=tid))
    assert w.flush() == 20
    rows = _rows(db_settings, host_id)
    assert len(rows) == 20
    assert {r.job_id for r in rows if r.gpu_index == 0} == {tid}
    assert {r.job_type for r in rows if r.gpu_index == 0} == {"training"}
    assert {r.job_id for r in rows if r.gpu_index == 1} == {None}
    assert rows[0].timestamp == start and rows[0].memory_total == 80_000
    # Writing the same samples again (a batch whose commit was not acknowledged) adds nothing.
    w.add(make_samples(host, start, gpus=2, seconds=10, training=tid))
    w.flush()
    assert len(_rows(db_settings, host_id)) == 20
    assert w.stats.written_total == 40 and w.stats.buffered == 0


def test_lost_gpu_and_refused_utilization_are_not_stored_but_counted(settings):
    from gpufleet.db.session import upgrade_database

    upgrade_database(settings)
    host_id, host = make_host(settings)
    samples = make_samples(host, datetime(2026, 3, 1, tzinfo=timezone.utc), gpus=3, seconds=1)
    samples[1].lost = True
    samples[2].utilization = None
    w = MetricsWriter(settings, host_id)
    w.add(samples)
    w.flush()
    assert [r.gpu_index for r in _rows(settings, host_id)] == [0]
    assert w.stats.unstorable_total == 2


@pytest.mark.postgres
def test_rows_wait_while_the_database_is_unreachable_and_overflow_drops_the_oldest(pg_migrated_url):
    s = load_settings(database_url=pg_migrated_url)
    host_id, host = make_host(s)
    # A real PostgreSQL URL on a port where nothing listens: every flush fails.
    dead = get_engine("postgresql+psycopg://postgres@127.0.0.1:9/none?connect_timeout=1")
    w = MetricsWriter(s, host_id, max_buffer=15, engine=dead)
    start = datetime(2026, 3, 2, tzinfo=timezone.utc)
    w.add(make_samples(host, start, gpus=1, seconds=10))
    with pytest.raises(Exception):  # noqa: B017 - whatever the dead engine raises, the buffer must keep the rows
        w.flush()
    assert w.stats.buffered == 10 and w.stats.last_error
    w.add(make_samples(host, start + timedelta(seconds=10), gpus=1, seconds=10))
    assert w.stats.buffered == 15 and w.stats.dropped_total == 5
    w._engine = get_engine(s.effective_database_url)  # the database is back
    assert w.flush() == 15
    stamps = [r.timestamp for r in _rows(s, host_id)]
    # The five oldest went; everything newer is there, in order.
    assert stamps == [start + timedelta(seconds=i) for i in range(5, 20)]


@pytest.mark.postgres
def test_partitions_take_rows_from_the_default_partition_and_expire_whole_days(pg_migrated_url):
    s = load_settings(database_url=pg_migrated_url, retention_days=2)
    eng = get_engine(s.effective_database_url)
    host_id, host = make_host(s)
    day = date(2021, 5, 10)
    t0 = datetime(2021, 5, 10, 23, 59, 50, tzinfo=timezone.utc)
    w = MetricsWriter(s, host_id)
    w.add(make_samples(host, t0, gpus=1, seconds=20))  # 10 s on the 10th, 10 s on the 11th
    w.flush()
    with eng.connect() as c:
        assert c.execute(text("SELECT count(*) FROM gpu_metrics_history_default WHERE host_id=:h"),
                         {"h": host_id}).scalar() == 20
    created = retention.ensure_partitions(eng, days_ahead=1, today=day)
    assert created == ["gpu_metrics_history_p20210510", "gpu_metrics_history_p20210511"]
    with eng.connect() as c:
        assert c.execute(text("SELECT count(*) FROM gpu_metrics_history_default WHERE host_id=:h"),
                         {"h": host_id}).scalar() == 0
        assert c.execute(text("SELECT count(*) FROM gpu_metrics_history_p20210510")).scalar() == 10
    assert retention.ensure_partitions(eng, days_ahead=1, today=day) == []
    # Cutoff (now - 2 days) on the 10th at noon: no day is wholly past it yet.
    noon = datetime(2021, 5, 12, 12, tzinfo=timezone.utc)
    assert retention.expire(s, s, now=noon, engine=eng).dropped_partitions == []
    res = retention.expire(s, s, now=datetime(2021, 5, 13, 0, 0, 1, tzinfo=timezone.utc), engine=eng)
    assert res.dropped_partitions == ["gpu_metrics_history_p20210510"]
    assert len(_rows(s, host_id)) == 10
    res = retention.expire(s, s, now=datetime(2021, 5, 14, 0, 0, 1, tzinfo=timezone.utc), engine=eng)
    assert res.dropped_partitions == ["gpu_metrics_history_p20210511"]
    assert _rows(s, host_id) == []


def test_sqlite_expiry_deletes_in_chunks(settings):
    from gpufleet.db.session import upgrade_database

    s = load_settings(data_dir=settings.data_dir, retention_days=1)
    upgrade_database(s)
    host_id, host = make_host(s)
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    w = MetricsWriter(s, host_id)
    w.add(make_samples(host, start, gpus=2, seconds=30))
    w.flush()
    res = retention.expire(s, s, now=start + timedelta(days=1, seconds=10), chunk=7)
    assert res.deleted_rows == 20
    assert {r.timestamp for r in _rows(s, host_id)} == {start + timedelta(seconds=i) for i in range(10, 30)}


def test_rollups_and_history_agree_and_respect_points(db_settings):
    host_id, host = make_host(db_settings)
    start = datetime(2022, 7, 1, 0, 0, tzinfo=timezone.utc)
    w = MetricsWriter(db_settings, host_id)
    w.add(make_samples(host, start, gpus=2, seconds=300))  # 5 minutes
    w.flush()
    eng = get_engine(db_settings.effective_database_url)
    retention.rollup(eng, start, start + timedelta(minutes=5))
    with session_scope(db_settings) as sess:
        n = sess.scalar(select(func.count()).select_from(GPUMetricsRollup).where(GPUMetricsRollup.host_id == host_id))
    assert n == 10
    q = HistoryQuery(start=start, end=start + timedelta(minutes=5), points=10, host=host, source="raw")
    raw = query_history(db_settings, db_settings, q)
    assert raw.source == "raw" and raw.step_s == 30
    assert [(s.host, s.gpu_index) for s in raw.series] == [(host, 0), (host, 1)]
    p0 = raw.series[1].points[0]
    # GPU 1, first 30 s: utilization 10 + t for t in 0..29.
    assert (p0["utilization_min"], p0["utilization_avg"], p0["utilization_max"]) == (10, 24.5, 39)
    assert p0["samples"] == 30 and len(raw.series[1].points) == 10
    rolled = query_history(db_settings, db_settings, HistoryQuery(start=start, end=start + timedelta(minutes=5),
                                                     points=10, host=host, source="rollup"))
    assert rolled.step_s == 60 and len(rolled.series[1].points) == 5
    r0 = rolled.series[1].points[0]
    assert (r0["utilization_min"], r0["utilization_avg"], r0["utilization_max"]) == (10, 39.5, 69)
    agg = query_history(db_settings, db_settings, HistoryQuery(start=start, end=start + timedelta(minutes=5), points=5,
                                                  gpus=(GPURef(host, 0), GPURef(host, 1)), aggregate=True))
    assert len(agg.series) == 1 and agg.series[0].points[0]["samples"] == 120
    assert agg.series[0].points[0]["utilization_max"] == 69


def test_bad_history_requests_say_what_to_fix(db_settings):
    t = datetime(2022, 1, 1, tzinfo=timezone.utc)
    with pytest.raises(HistoryError, match="must be after"):
        HistoryQuery(start=t, end=t)
    with pytest.raises(HistoryError, match="points must be between"):
        HistoryQuery(start=t, end=t + timedelta(hours=1), points=0)
    with pytest.raises(HistoryError, match="host:index"):
        GPURef.parse("zero")
    with pytest.raises(HistoryError, match="unknown host nope"):
        query_history(db_settings, db_settings, HistoryQuery(start=t, end=t + timedelta(hours=1), host="nope"))


def test_coarse_history_merges_rollups_with_the_newest_raw_minutes(db_settings):
    host_id, host = make_host(db_settings)
    start = datetime(2022, 8, 1, 0, 0, tzinfo=timezone.utc)
    end = start + timedelta(minutes=6)
    w = MetricsWriter(db_settings, host_id)
    w.add(make_samples(host, start, gpus=1, seconds=360))
    w.flush()
    # Maintenance has rolled up the first three minutes only.
    retention.rollup(get_engine(db_settings.effective_database_url), start, start + timedelta(minutes=3))
    now = start + timedelta(minutes=7)
    q = HistoryQuery(start=start, end=end, points=3, host=host)
    auto = query_history(db_settings, db_settings, q, now=now)
    raw = query_history(db_settings, db_settings,
                        HistoryQuery(start=start, end=end, points=3, host=host, source="raw"), now=now)
    assert auto.source == "rollup+raw" and auto.step_s == raw.step_s == 120
    # Bucket 2 (minutes 2-3) is one rolled-up minute and one raw minute.
    for a, r in zip(auto.series[0].points, raw.series[0].points, strict=True):
        assert a["t"] == r["t"] and a["samples"] == r["samples"] == 120
        assert (a["utilization_min"], a["utilization_max"]) == (r["utilization_min"], r["utilization_max"])
        assert a["utilization_avg"] == pytest.approx(r["utilization_avg"])
        assert a["power_draw_max"] == r["power_draw_max"]


def test_maintenance_rolls_up_late_rows_and_creates_todays_partitions(db_settings):
    host_id, host = make_host(db_settings)
    now = datetime.now(timezone.utc).replace(second=30, microsecond=0)
    start = now - timedelta(minutes=20)
    w = MetricsWriter(db_settings, host_id)
    w.add(make_samples(host, start, gpus=1, seconds=600))
    w.flush()
    retention.maintain(db_settings, db_settings, now=now)
    # Rows that arrive late (buffered through an outage) land in minutes already rolled up.
    w.add(make_samples(host, start + timedelta(minutes=10), gpus=1, seconds=60))
    w.flush()
    retention.maintain(db_settings, db_settings, now=now)
    with session_scope(db_settings) as sess:
        total = sess.scalar(select(func.sum(GPUMetricsRollup.samples)).where(GPUMetricsRollup.host_id == host_id))
    assert total == 660
    eng = get_engine(db_settings.effective_database_url)
    if eng.dialect.name == "postgresql":
        with eng.connect() as c:
            names = set(c.execute(
                text("SELECT relname FROM pg_class WHERE relname LIKE 'gpu_metrics_history_p%'")).scalars())
        assert retention.partition_name(now.date()) in names
