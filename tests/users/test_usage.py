"""Usage accounting with known durations: held time from allocations, used time from rollups."""

from __future__ import annotations

import uuid
from datetime import date, datetime, timedelta, timezone

import pytest
from sqlalchemy import delete

from gpufleet.config import Settings
from gpufleet.db.models import GPUMetricsRollup
from gpufleet.db.session import session_scope
from gpufleet.users.accounts import add_user
from gpufleet.users.groups import add_member, create_group
from gpufleet.users.usage import NO_GROUP, UsageError, parse_day, store_usage, totals_by_user, usage_report
from support.sharing import held_training, make_host, rollup_minutes

DAY = date(2026, 3, 10)


def at(day: date, hh: int, mm: int = 0) -> datetime:
    return datetime(day.year, day.month, day.day, hh, mm, tzinfo=timezone.utc)


@pytest.fixture
def seeded(db_settings: Settings) -> dict:
    alice, bob, carol, group = ("a" + uuid.uuid4().hex[:8], "b" + uuid.uuid4().hex[:8],
                                "c" + uuid.uuid4().hex[:8], "g" + uuid.uuid4().hex[:8])
    with session_scope(db_settings) as sess:
        for n in (alice, bob, carol):
            add_user(sess, n)
        create_group(sess, group)
        add_member(sess, group, alice)
        add_member(sess, group, bob)
    host = make_host(db_settings)
    prev = DAY - timedelta(days=1)
    held_training(db_settings, host, alice, [(0, at(DAY, 10), at(DAY, 12, 30)),   # 9000 s
                                             (1, at(DAY, 11), at(DAY, 11, 45))])  # 2700 s
    held_training(db_settings, host, alice, [(2, at(prev, 23), at(DAY, 1))])      # 3600 s each day
    held_training(db_settings, host, bob, [(3, at(DAY, 8), at(DAY, 8, 10))])       # 600 s
    held_training(db_settings, host, carol, [(3, at(DAY, 20), at(DAY, 20, 1))])    # 60 s, in no group
    # GPU 0 at 50 % for the first ten minutes alice held it; the minute before is not hers.
    rollup_minutes(db_settings, host, 0, [at(DAY, 10, m) for m in range(10)], 50.0)
    rollup_minutes(db_settings, host, 0, [at(DAY, 9, 59)], 100.0)
    return {"alice": alice, "bob": bob, "carol": carol, "group": group, "host": host}


def _by_name(rows, names) -> dict:
    return {(r.day, r.name): r for r in rows if r.name in names}


def test_usage_per_day_is_the_sum_of_held_allocation_time(db_settings: Settings, seeded: dict) -> None:
    a, b = seeded["alice"], seeded["bob"]
    with session_scope(db_settings) as sess:
        rows = _by_name(usage_report(sess, "user", DAY - timedelta(days=1), DAY), {a, b})
    assert rows[(DAY, a)].gpu_seconds_held == 9000 + 2700 + 3600
    assert rows[(DAY, a)].trainings == 2
    assert rows[(DAY - timedelta(days=1), a)].gpu_seconds_held == 3600
    assert rows[(DAY, b)].gpu_seconds_held == 600
    assert rows[(DAY, a)].gpu_seconds_used == 10 * 60 * 0.5
    assert rows[(DAY, b)].gpu_seconds_used == 0


def test_usage_by_group_and_no_group(db_settings: Settings, seeded: dict) -> None:
    with session_scope(db_settings) as sess:
        rows = {r.name: r for r in usage_report(sess, "group", DAY, DAY)}
    assert rows[seeded["group"]].gpu_seconds_held == 9000 + 2700 + 3600 + 600
    assert rows[NO_GROUP].gpu_seconds_held >= 60  # carol (other tests' trainings may share the day)


def test_usage_per_training(db_settings: Settings, seeded: dict) -> None:
    with session_scope(db_settings) as sess:
        rows = {r.name: r for r in usage_report(sess, "training", DAY, DAY)}
    held = sorted(r.gpu_seconds_held for r in rows.values())
    assert {9000 + 2700, 3600, 600, 60} <= set(held)
    assert all(r.trainings == 1 for r in rows.values())


def test_stored_usage_is_not_counted_twice_and_outlives_the_rollups(db_settings: Settings, seeded: dict) -> None:
    a = seeded["alice"]
    with session_scope(db_settings) as sess:
        store_usage(sess, DAY - timedelta(days=1), DAY)
    with session_scope(db_settings) as sess:
        store_usage(sess, DAY - timedelta(days=1), DAY)  # idempotent
        sess.execute(delete(GPUMetricsRollup).where(GPUMetricsRollup.host_id == seeded["host"]))
    with session_scope(db_settings) as sess:
        row = _by_name(usage_report(sess, "user", DAY, DAY), {a})[(DAY, a)]
        totals = totals_by_user(sess)
    assert row.gpu_seconds_held == 15300 and row.gpu_seconds_used == 300
    assert totals[a] == (15300 + 3600, 300)


def test_a_running_allocation_counts_until_now(db_settings: Settings) -> None:
    owner = "r" + uuid.uuid4().hex[:8]
    host = make_host(db_settings, 1)
    held_training(db_settings, host, owner, [(0, at(DAY, 6), None)], status="running")
    with session_scope(db_settings) as sess:
        rows = _by_name(usage_report(sess, "user", DAY, DAY, now=at(DAY, 6, 30)), {owner})
    assert rows[(DAY, owner)].gpu_seconds_held == 1800


@pytest.mark.parametrize(("by", "first", "last", "why"), [
    ("team", DAY, DAY, "by='team' is not one of user, group, training"),
    ("user", DAY, DAY - timedelta(days=1), "before from"),
    ("user", DAY - timedelta(days=400), DAY, "at most 366"),
])
def test_bad_questions_say_what_to_fix(db_settings: Settings, by: str, first: date, last: date, why: str) -> None:
    with session_scope(db_settings) as sess, pytest.raises(UsageError, match=why):
        usage_report(sess, by, first, last)


def test_days_must_be_iso_dates() -> None:
    assert parse_day("from", "2026-03-10", DAY) == DAY
    assert parse_day("from", None, DAY) == DAY
    with pytest.raises(UsageError, match="use YYYY-MM-DD"):
        parse_day("from", "10/03/2026", DAY)


def test_used_counts_the_part_of_each_minute_the_allocation_held(db_settings: Settings) -> None:
    owner = "u" + uuid.uuid4().hex[:8]
    host = make_host(db_settings, 2)
    sec = timedelta(seconds=1)
    # 17.4 s across a minute boundary at 40 %: the whole next minute used to count (24 s used, 17.4 held).
    across = at(DAY, 7, 0) + 50 * sec
    held_training(db_settings, host, owner, [(0, across, across + timedelta(seconds=17.4))])
    rollup_minutes(db_settings, host, 0, [at(DAY, 7, 0), at(DAY, 7, 1)], 40.0)
    # 32 s inside one minute at 90 %: no minute started inside it, so it used to count nothing.
    inside = at(DAY, 7, 10) + 10 * sec
    held_training(db_settings, host, owner, [(1, inside, inside + 32 * sec)])
    rollup_minutes(db_settings, host, 1, [at(DAY, 7, 9), at(DAY, 7, 10), at(DAY, 7, 11)], 90.0)
    with session_scope(db_settings) as sess:
        rows = {r.name: r for r in usage_report(sess, "training", DAY, DAY)}
    mine = sorted((r.gpu_seconds_held, r.gpu_seconds_used) for r in rows.values()
                  if r.gpu_seconds_held in (17.4, 32.0))
    assert mine == [(17.4, pytest.approx(17.4 * 0.4)), (32.0, pytest.approx(32 * 0.9))]
    assert all(r.gpu_seconds_used <= r.gpu_seconds_held for r in rows.values())
