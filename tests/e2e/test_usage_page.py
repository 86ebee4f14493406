"""The Usage page in a browser: GPU-hours per day for each user, as stacked bars and a table."""

from __future__ import annotations

import uuid
from datetime import datetime, time, timedelta, timezone
from pathlib import Path

import pytest

from sqlalchemy import select

from gpufleet.config import load_settings
from gpufleet.db.bookings import Booking, BookingGPU
from gpufleet.db.models import GPU
from gpufleet.db.session import write_session
from gpufleet.users.accounts import add_user
from gpufleet.users.groups import add_member, create_group
from support.sharing import held_training, make_host

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_usage_page_shows_each_users_gpu_hours_per_day(page, server, screenshots: Path) -> None:
    settings = load_settings(data_dir=server.data_dir)
    tag = uuid.uuid4().hex[:4]
    alice, bob, group = f"alice-{tag}", f"bob-{tag}", f"vision-{tag}"
    with write_session(settings) as sess:
        add_user(sess, alice)
        add_user(sess, bob)
        create_group(sess, group)
        add_member(sess, group, alice)
        add_member(sess, group, bob)
    today = datetime.now(timezone.utc).date()
    yesterday, before = today - timedelta(days=1), today - timedelta(days=2)

    def at(day, hh: int) -> datetime:
        return datetime.combine(day, time(hh), tzinfo=timezone.utc)

    host = make_host(settings)
    # Yesterday: alice 2 GPUs x 3 h = 6 GPU-hours, bob 1 GPU x 2 h; the day before: alice 4 h.
    held_training(settings, host, alice, [(0, at(yesterday, 8), at(yesterday, 11)),
                                          (1, at(yesterday, 8), at(yesterday, 11))])
    held_training(settings, host, bob, [(2, at(yesterday, 12), at(yesterday, 14))])
    held_training(settings, host, alice, [(3, at(before, 1), at(before, 5))])

    page.goto("/")
    page.get_by_role("link", name="Usage").click()
    table = page.get_by_test_id("usage-table")
    table.wait_for()
    row = table.locator(f'tr[data-name="{alice}"]').first
    assert row.locator("td").all_inner_texts()[:3] == [str(yesterday), alice, "6.00"]
    bar = page.get_by_test_id("usage-chart").locator(f'g[data-day="{yesterday}"]')
    assert bar.locator(f'rect[data-name="{alice}"]').get_attribute("data-hours") == "6"
    assert bar.locator(f'rect[data-name="{bob}"]').get_attribute("data-hours") == "2"
    # Alice's booking of GPU 0 yesterday 08:00-12:00: 4 GPU-hours booked, 3 of them used by her training there.
    with write_session(settings) as sess:
        gpu = sess.scalars(select(GPU).where(GPU.host_id == host, GPU.index == 0)).one()
        b = Booking(owner=alice, start_at=at(yesterday, 8), end_at=at(yesterday, 12), gpu_count=1, created_by=alice)
        sess.add(b)
        sess.flush()
        sess.add(BookingGPU(booking_id=b.id, gpu_id=gpu.id, host_id=host, gpu_index=0, start_at=b.start_at,
                            end_at=b.end_at))
    page.reload()
    table = page.get_by_test_id("usage-table")
    table.wait_for()
    heads = [h.strip().lower() for h in table.locator("thead th").all_inner_texts()]
    row = table.locator(f'tr[data-name="{alice}"]').first
    cells = row.locator("td").all_inner_texts()
    assert (cells[heads.index("booked")], cells[heads.index("of booked, used")]) == ("4.00", "3.00"), (heads, cells)
    page.screenshot(path=str(screenshots / "usage-by-user.png"), full_page=True)

    page.get_by_role("button", name="By group").click()
    group_row = page.get_by_test_id("usage-table").locator(f'tr[data-name="{group}"]').first
    group_row.wait_for()
    assert group_row.locator("td").all_inner_texts()[:3] == [str(yesterday), group, "8.00"]
    page.screenshot(path=str(screenshots / "usage-by-group.png"), full_page=True)
