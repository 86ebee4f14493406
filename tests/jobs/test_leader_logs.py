"""A database outage is logged once when it starts and once when it ends, not at every retry."""

from __future__ import annotations

import logging

import pytest
from support.postgres import pg_ctl, start_server

from support.fleet import make_settings, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]


def test_leadership_loss_is_logged_once_and_its_end_with_the_duration(tmp_path, request, scheduler, caplog,
                                                                      pg_control):
    s = make_settings(tmp_path, "postgresql", request)
    caplog.set_level(logging.DEBUG, logger="gpufleet.jobs.scheduler_loop")

    def records(text: str, level: int | None = None) -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name == "gpufleet.jobs.scheduler_loop" and text in r.getMessage()
                and (level is None or r.levelno == level)]

    scheduler(s)
    pg_ctl(pg_control, "stop", "-m", "fast", "-w")
    try:
        # Many retries while the server is away (each one a debug line), however long they take.
        wait_for(lambda: len(records("still")) >= 8, 120, "eight retries during the outage", 0.2)
    finally:
        start_server(pg_control)
    wait_for(lambda: records("regained") or records("work again"), 120, "the recovery to be logged", 0.2)
    warnings = [r for r in caplog.records if r.name == "gpufleet.jobs.scheduler_loop" and r.levelno >= logging.WARNING]
    said = [r.getMessage() for r in warnings]
    # Each state change once: the leadership lost (and a tick that failed as the server went), then regained.
    assert len([m for m in said if m.startswith("scheduler leadership lost")]) == 1, said
    assert len([m for m in said if m.startswith("scheduler ticks fail")]) <= 1, said
    regained = [m for m in said if m.startswith("scheduler leadership regained after ")]
    assert len(regained) == 1, said
    assert float(regained[0].removeprefix("scheduler leadership regained after ").rstrip("s")) > 0
    assert len(said) <= 4, said
