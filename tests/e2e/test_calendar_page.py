"""The Calendar page in a browser: a member books GPUs, in her own zone, and a conflict shows who is in the way."""

from __future__ import annotations

import shutil
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from gpufleet.bookings import service
from gpufleet.config import load_settings
from gpufleet.db.session import write_session
from gpufleet.users.accounts import add_user

from .conftest import sign_in, wait_shown

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
BERLIN = ZoneInfo("Europe/Berlin")


def _book_for(settings, owner: str, start: datetime, hours: int) -> str:
    now = datetime.now(timezone.utc)
    with write_session(settings) as sess:
        wanted = service.Wanted(start, start + timedelta(hours=hours), 4, owner=owner, reason="paper deadline")
        b = service.create(sess, service.Actor("root", True), wanted, settings, now)
        return str(b.id)


def test_a_member_books_from_the_calendar_and_a_conflict_shows_who_is_in_the_way(browser, auth_server,
                                                                                tmp_path: Path) -> None:
    srv, token = auth_server
    settings = load_settings(data_dir=srv.data_dir)
    with write_session(settings) as sess:
        add_user(sess, "bob")
    # Tomorrow in Berlin, 10:00-14:00 Berlin time: bob holds all four GPUs.
    day = (datetime.now(BERLIN) + timedelta(days=1)).date()
    bobs = _book_for(settings, "bob", datetime(day.year, day.month, day.day, 10, tzinfo=BERLIN), 4)

    ctx = browser.new_context(base_url=srv.url, viewport={"width": 1280, "height": 900}, timezone_id="Europe/Berlin")
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.set_default_timeout(20_000)
    try:
        page.goto("/")
        sign_in(page, token)
        page.get_by_role("link", name="Calendar").click()
        wait_shown(page, "calendar-grid", srv)
        assert "Europe/Berlin" in page.get_by_test_id("calendar-range").inner_text()
        theirs = page.locator(f'[data-booking="{bobs}"][data-testid="booking-bar"]')
        assert theirs.count() == 4 and theirs.first.get_attribute("data-mark") == "other"
        assert "10:00–14:00" in theirs.first.get_attribute("aria-label")  # in the viewer's zone, not UTC

        # 4 GPUs from 11:00 Berlin for 2 h: bob's booking is in the way; the next free window starts at 14:00.
        page.get_by_label("GPUs", exact=True).fill("4")
        page.get_by_label("Start", exact=True).fill(f"{day.isoformat()}T11:00")
        page.get_by_label("Hours", exact=True).fill("2")
        page.get_by_role("button", name="Book", exact=True).click()
        note = page.get_by_test_id("booking-conflict")
        note.wait_for()
        assert note.get_by_test_id("in-the-way-owner").inner_text() == "bob"
        assert "10:00–14:00" in note.get_by_test_id("in-the-way-window").inner_text()
        assert "14:00–16:00" in note.get_by_test_id("next-free-window").inner_text()
        page.screenshot(path=str(tmp_path / "calendar-conflict.png"), full_page=True)

        note.get_by_role("button", name="Use this window").click()
        assert page.get_by_label("Start", exact=True).input_value() == f"{day.isoformat()}T14:00"
        page.get_by_role("button", name="Book", exact=True).click()
        page.get_by_test_id("booked").wait_for()
        mine = page.locator('[data-testid="booking-bar"][data-mark="mine"]')
        mine.first.wait_for()
        assert mine.count() == 4
        assert "alice (yours)" in mine.first.get_attribute("aria-label")
        assert "14:00–16:00" in mine.first.get_attribute("aria-label")
        assert "cal-mine" in (mine.first.get_attribute("class") or "")
        page.screenshot(path=str(tmp_path / "calendar.png"), full_page=True)
        shutil.copy(tmp_path / "calendar.png", "/tmp/calendar.png")

        # She cancels her own from the list; bob's has no Cancel for her.
        row = page.get_by_test_id("booking-list").locator('tr[data-mark="mine"]')
        assert page.get_by_test_id("booking-list").locator(f'tr[data-booking="{bobs}"] button').count() == 0
        row.get_by_role("button", name="Cancel").click()
        mine.first.wait_for(state="detached")
    finally:
        ctx.close()
        with write_session(settings) as sess:  # the shared server's GPUs free again for the other tests
            service.cancel(sess, service.Actor("root", True), uuid.UUID(bobs), datetime.now(timezone.utc))
    assert not errors, f"the dashboard threw in the browser: {errors}"
