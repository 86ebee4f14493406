"""A member host's judge of the rank-0 host's lease, on SQLite and PostgreSQL: after an outage both hosts
shared, the rank-0 host's worker gets its lease's whole term of reachable time from the database's return to
renew (as the scheduler's recovery gives it), not one second from the lease's lapse, which a loaded machine's
worker missed in a fresh-clone run and the gang across two hosts was stopped and requeued for nothing."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gpufleet.config import Settings
from gpufleet.db.session import session_scope
from gpufleet.db.types import utcnow
from gpufleet.jobs.gang_member import LeaderJudge
from gpufleet.lifecycle.models import Training


def _judge_after_outage(s: Settings, back_s: float, renewed_s: float) -> LeaderJudge:
    """A running training whose lease was last renewed ``renewed_s`` ago, judged by a host that could not
    reach the database from just before that renewal until ``back_s`` ago."""
    now = utcnow()
    with session_scope(s) as sess:
        t = Training(name="gang", owner="ada", recipe="mlp", config={}, status="running", attempt=1,
                     lease_expires_at=now - timedelta(seconds=renewed_s) + timedelta(seconds=s.lease_s))
        sess.add(t)
        sess.flush()
        tid = t.id
    judge = LeaderJudge(s, s, tid, 1)
    judge.reach.gaps = [(now - timedelta(seconds=renewed_s + 5), now - timedelta(seconds=back_s))]
    judge.reach.last_ok, judge.reach.blind = now - timedelta(seconds=back_s), False
    return judge


@pytest.mark.parametrize("db_settings", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)],
                         indirect=True)
def test_after_an_outage_the_rank0_lease_gets_its_term_of_reachable_time_to_be_renewed(db_settings) -> None:
    s = db_settings.model_copy(update={"lease_s": 10.0})
    # Back 2 s ago; renewed 40 s ago, so lapsed 30 s ago by the wall clock, 2 s of it reachable: wait.
    assert _judge_after_outage(s, back_s=2.0, renewed_s=40.0).look() is None
    # Back 9 s ago: still within its term (10 s) and the moment after it.
    assert _judge_after_outage(s, back_s=9.0, renewed_s=40.0).look() is None
    # Back 15 s ago and not renewed since: its worker is gone.
    assert _judge_after_outage(s, back_s=15.0, renewed_s=40.0).look() == \
        "the rank-0 host's worker stopped renewing its lease"


@pytest.mark.parametrize("db_settings", ["sqlite"], indirect=True)
def test_with_no_outage_a_lapsed_lease_is_judged_a_moment_after_it_lapsed(db_settings) -> None:
    s = db_settings.model_copy(update={"lease_s": 10.0})
    now = utcnow()
    with session_scope(s) as sess:
        t = Training(name="gang", owner="ada", recipe="mlp", config={}, status="running", attempt=1,
                     lease_expires_at=now - timedelta(seconds=3))
        sess.add(t)
        sess.flush()
        tid = t.id
    judge = LeaderJudge(s, s, tid, 1)
    judge.reach.gaps, judge.reach.last_ok, judge.reach.blind = [], now - timedelta(seconds=60), False
    assert judge.look() == "the rank-0 host's worker stopped renewing its lease"
    with session_scope(s) as sess:
        sess.get(Training, tid).lease_expires_at = utcnow() + timedelta(seconds=5)
    assert judge.look() is None  # renewed
