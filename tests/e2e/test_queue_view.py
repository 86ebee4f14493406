"""The Trainings page in a browser: a waiting training's place in the queue, and the "Only mine" filter."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import update

from gpufleet.config import load_settings
from gpufleet.db.models import Training
from gpufleet.db.session import write_session
from gpufleet.db.types import utcnow

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _waiting(settings, owner: str, name: str, priority: int) -> object:
    """A queued training held back for a day (``not_before``), so the scheduler leaves it queued."""
    with write_session(settings) as sess:
        t = Training(name=name, owner=owner, recipe="mlp", config={}, status="queued", priority=priority,
                     not_before=utcnow() + timedelta(days=1), wait_reason="held back until tomorrow")
        sess.add(t)
        sess.flush()
        return t.id


def test_trainings_page_shows_queue_places_and_filters_to_mine(page, server, screenshots: Path) -> None:
    settings = load_settings(data_dir=server.data_dir)
    me = httpx.get(f"{server.url}/api/v1/auth/whoami", timeout=10).json()["name"]
    ids = [_waiting(settings, "someone-else", "queue-other", 3), _waiting(settings, me, "queue-mine", 0)]
    try:
        page.goto("/trainings?status=queued")
        other, mine = (page.get_by_test_id(f"training-row-{i}") for i in ids)
        mine.wait_for()
        # Higher priority is served first: the other owner's training is ahead of mine.
        assert mine.get_by_test_id("queue-place").inner_text() == "#2 in queue"
        assert other.get_by_test_id("queue-place").inner_text() == "#1 in queue"
        page.screenshot(path=str(screenshots / "trainings-queue.png"), full_page=True)
        page.get_by_label("Only mine").check()
        page.wait_for_function("(id) => !document.querySelector(`[data-testid='training-row-${id}']`)", arg=str(ids[0]))
        assert page.get_by_label("Owner").input_value() == me
        mine.wait_for()
        page.screenshot(path=str(screenshots / "trainings-only-mine.png"), full_page=True)
    finally:
        with write_session(settings) as sess:
            sess.execute(update(Training).where(Training.id.in_(ids)).values(status="cancelled", finished_at=utcnow()))
