"""Booked GPU time in the usage report and in weekly quotas, on SQLite and PostgreSQL: a booking's GPU time
up to its end, cancel or release; the part of it the booker's own work held on the booked GPUs (two of her
trainings at once counted once, another member's work on them not at all); maintenance nobody's. A weekly
quota counts the booked time left unused as held where bookings count as booked, and not where they
count as used."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import select

from gpufleet.config import Settings
from gpufleet.db.bookings import Booking, BookingGPU, release_rows
from gpufleet.db.models import GPU, GPUAllocation, Training
from gpufleet.db.session import session_scope
from gpufleet.scheduling.quotas import over_quota
from gpufleet.users.accounts import add_user
from gpufleet.users.groups import Limits, add_member, create_group, set_user_quota
from gpufleet.users.usage import NO_GROUP, usage_report

pytestmark = pytest.mark.parametrize("db_settings", ["sqlite", pytest.param("postgresql",
                                                                            marks=pytest.mark.postgres)],
                                     indirect=True)
DAY = datetime(2026, 12, 7, tzinfo=timezone.utc)  # the day everything below happened (a Monday)
NOW = DAY + timedelta(days=1, hours=12)
H = 3600.0


def at(hours: float) -> datetime:
    return DAY + timedelta(hours=hours)


def _book(sess, owner: str, gpus: list[GPU], start: float, end: float, kind: str = "booking") -> Booking:
    b = Booking(owner=owner, kind=kind, start_at=at(start), end_at=at(end), gpu_count=len(gpus), created_by=owner)
    sess.add(b)
    sess.flush()
    sess.add_all(BookingGPU(booking_id=b.id, gpu_id=g.id, host_id=g.host_id, gpu_index=g.index, start_at=at(start),
                            end_at=at(end)) for g in gpus)
    sess.flush()
    return b


def _held(sess, owner: str, spans: list[tuple[GPU, float, float]]) -> Training:
    t = Training(name="held", owner=owner, recipe="mlp", config={}, status="succeeded")
    sess.add(t)
    sess.flush()
    sess.add_all(GPUAllocation(training_id=t.id, gpu_id=g.id, host_id=g.host_id, gpu_index=g.index,
                               allocated_at=at(a), released_at=at(b), exclusive=False) for g, a, b in spans)
    sess.flush()
    return t


@pytest.fixture
def week(db_settings: Settings, add_host) -> Settings:
    host = add_host(f"h-{uuid.uuid4().hex[:6]}")
    with session_scope(db_settings) as sess:
        g = list(sess.scalars(select(GPU).where(GPU.host_id == host.id).order_by(GPU.index)))
        for name in ("alice", "bob"):
            add_user(sess, name)
        create_group(sess, "vision")
        add_member(sess, "vision", "alice")
        # Alice books GPUs 0 and 1 from 08:00 to 12:00 (8 GPU-hours) and GPU 2 from 12:00 to 18:00, which she
        # cancels at 13:00 (1 GPU-hour booked); GPU 3 is in maintenance all afternoon.
        _book(sess, "alice", g[:2], 8, 12)
        release_rows(sess, _book(sess, "alice", [g[2]], 12, 18), at(13), "cancelled by alice")
        _book(sess, "admin", [g[3]], 12, 18, kind="maintenance")
        # Her two trainings share GPU 0 (09:00-11:00 and 10:00-11:30: 2.5 h of it used), and one ran on GPU 2
        # from 11:00 to 14:00 (12:00-13:00 of it in her booking); bob's on GPU 1 is not her use of it.
        _held(sess, "alice", [(g[0], 9, 11), (g[2], 11, 14)])
        _held(sess, "alice", [(g[0], 10, 11.5)])
        _held(sess, "bob", [(g[1], 10, 11), (g[3], 13, 14)])
    return db_settings


def test_the_usage_report_shows_booked_hours_and_the_part_the_booker_used(week: Settings) -> None:
    with session_scope(week) as sess:
        by_user = {r.name: r for r in usage_report(sess, "user", DAY.date(), DAY.date(), now=NOW)}
        by_group = {r.name: r for r in usage_report(sess, "group", DAY.date(), DAY.date(), now=NOW)}
        by_training = usage_report(sess, "training", DAY.date(), DAY.date(), now=NOW)
    alice, bob = by_user["alice"], by_user["bob"]
    assert (alice.gpu_seconds_booked, alice.gpu_seconds_booked_used) == (9 * H, 3.5 * H)
    assert alice.gpu_seconds_held == (2 + 3 + 1.5) * H
    assert (bob.gpu_seconds_booked, bob.gpu_seconds_booked_used) == (0, 0)
    assert "admin" not in by_user  # maintenance is nobody's booking
    assert by_group["vision"].gpu_seconds_booked == 9 * H and by_group[NO_GROUP].gpu_seconds_booked == 0
    assert all(r.gpu_seconds_booked == 0 for r in by_training)  # a booking is a person's, not a training's


def test_a_booking_counts_up_to_now_only(week: Settings) -> None:
    with session_scope(week) as sess:
        [alice] = [r for r in usage_report(sess, "user", DAY.date(), DAY.date(), now=at(10)) if r.name == "alice"]
    assert (alice.gpu_seconds_booked, alice.gpu_seconds_booked_used) == (4 * H, 1 * H)


@pytest.mark.parametrize("counting, waits", [("booked", True), ("used", False)])
def test_a_weekly_quota_counts_unused_booked_time_where_bookings_count_as_booked(
        week: Settings, counting: str, waits: bool) -> None:
    with session_scope(week) as sess:
        # Held 6.5 GPU-hours; booked 9, of which 3.5 used: as booked she has 6.5 + 5.5 = 12 of a 12-hour quota.
        set_user_quota(sess, "alice", Limits(gpu_hours_per_week=12))
        t = Training(name="next", owner="alice", recipe="mlp", config={}, status="queued", world_size=1)
        sess.add(t)
        sess.flush()
        why = over_quota(sess, t, counting, now=NOW)  # type: ignore[arg-type]
    if waits:
        assert why is not None and "held 12.0 of 12 GPU-hours" in why and "with 5.5 booked and unused" in why, why
    else:
        assert why is None
