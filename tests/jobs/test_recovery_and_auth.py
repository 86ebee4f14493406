"""Lease recovery, re-sending unclaimed tasks, scheduler leadership, and who may create/cancel."""

from __future__ import annotations

from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from gpufleet.db.models import GPUAllocation, Host, Training, TrainingEvent
from gpufleet.db.session import session_scope, write_session
from gpufleet.db.types import utcnow
from gpufleet.jobs.recovery import recover_expired, resend_stale
from gpufleet.jobs.scheduler_loop import Leader
from gpufleet.scheduling.scheduler import schedule_pending
from sqlalchemy import select

from support.fleet import TINY_SAE, make_settings, register, wait_for


def _running(settings, host_id, restarts, max_restarts, expired=True):
    """A training scheduled and claimed on GPU 0 whose worker then vanished."""
    with write_session(settings) as sess:
        t = Training(name="r", owner="o", recipe="sae", config=dict(TINY_SAE), gpu_ids=[0], host_id=host_id,
                     auto_select=False, restarts=restarts, max_restarts=max_restarts)
        sess.add(t)
    schedule_pending(settings)
    with write_session(settings) as sess:
        t = sess.get(Training, t.id)
        assert t.status == "scheduled"
        t.status = "running"
        t.lease_owner = "gone:1:x"
        t.lease_expires_at = utcnow() + timedelta(seconds=-1 if expired else 30)
    return t.id


def _active(settings, tid):
    with session_scope(settings) as sess:
        return sess.execute(select(GPUAllocation).where(GPUAllocation.training_id == tid,
                                                        GPUAllocation.released_at.is_(None))).scalars().all()


def test_expired_lease_requeues_then_fails_after_max_restarts(fleet_settings):
    host_id = register(fleet_settings)
    live = _running(fleet_settings, host_id, 0, 1, expired=False)
    assert live not in dict(recover_expired(fleet_settings, fleet_settings))  # its lease is still good
    with write_session(fleet_settings) as sess:  # let the GPU go for the next case
        sess.get(Training, live).lease_expires_at = utcnow() - timedelta(seconds=1)
    assert (live, "queued") in recover_expired(fleet_settings, fleet_settings)
    with session_scope(fleet_settings) as sess:
        t = sess.get(Training, live)
        ev = sess.execute(select(TrainingEvent).where(TrainingEvent.training_id == live)
                          .order_by(TrainingEvent.seq.desc())).scalars().first()
    assert t.status == "queued" and t.restarts == 1 and t.lease_owner is None
    assert ev.kind == "retry" and "stopped renewing its lease" in ev.reason and "restart 1 of 1" in ev.reason
    assert not _active(fleet_settings, live)
    # Its next attempt's worker vanishes too: restarts are spent, it fails.
    schedule_pending(fleet_settings)
    with write_session(fleet_settings) as sess:
        t = sess.get(Training, live)
        t.status, t.lease_owner, t.lease_expires_at = "running", "gone:2:y", utcnow() - timedelta(seconds=1)
    assert (live, "failed") in recover_expired(fleet_settings, fleet_settings)
    with session_scope(fleet_settings) as sess:
        t = sess.get(Training, live)
    assert t.status == "failed" and "gave up after 1 restart" in t.status_reason and t.finished_at
    assert not _active(fleet_settings, live)


def test_cancel_of_a_training_whose_worker_is_gone_ends_it(fleet_settings):
    from gpufleet.trainings.service import cancel

    host_id = register(fleet_settings)
    tid = _running(fleet_settings, host_id, 0, 3, expired=False)
    with write_session(fleet_settings) as sess:
        assert cancel(sess, tid, "ada").cancel_requested is True
        sess.get(Training, tid).lease_expires_at = utcnow() - timedelta(seconds=1)
    assert (tid, "cancelled") in recover_expired(fleet_settings, fleet_settings)
    with session_scope(fleet_settings) as sess:
        t = sess.get(Training, tid)
    assert t.status == "cancelled" and t.restarts == 0 and not _active(fleet_settings, tid)


def test_unclaimed_scheduled_training_is_sent_again(fleet_settings):
    host_id = register(fleet_settings)
    with write_session(fleet_settings) as sess:
        t = Training(name="u", owner="o", recipe="sae", config=dict(TINY_SAE), gpu_ids=[1], host_id=host_id,
                     auto_select=False)
        sess.add(t)
    sent = []

    def resend_mine() -> list:
        # The PostgreSQL database is shared by the session: other tests' stale
        # rows are resent too; this test is about its own training.
        resent = resend_stale(fleet_settings, fleet_settings, lambda tid, host: sent.append((tid, host)))
        return [i for i in resent if i == t.id]

    schedule_pending(fleet_settings, lambda tid, host: sent.append((tid, host)))
    assert [x for x in sent if x[0] == t.id] == [(t.id, fleet_settings.host_name)]
    del sent[:]
    assert resend_mine() == []
    with write_session(fleet_settings) as sess:
        sess.get(Training, t.id).scheduled_at = utcnow() - timedelta(seconds=60)
    assert resend_mine() == [t.id]
    assert (t.id, fleet_settings.host_name) in sent
    # Not again right away.
    assert resend_mine() == []
    # A host not seen for long gets its reservation back and the training waits again.
    with write_session(fleet_settings) as sess:
        sess.get(Training, t.id).scheduled_at = utcnow() - timedelta(minutes=10)
        sess.get(Host, host_id).last_heartbeat = utcnow() - timedelta(minutes=10)
    assert resend_mine() == []
    with session_scope(fleet_settings) as sess:
        row = sess.get(Training, t.id)
    assert row.status == "queued" and "has not been seen" in row.status_reason and not _active(fleet_settings, t.id)


@pytest.mark.postgres
def test_only_one_scheduler_leads_on_postgresql(tmp_path, request):
    settings = make_settings(tmp_path, "postgresql", request)
    a, b = Leader(settings), Leader(settings)
    try:
        assert a.acquire() is True
        assert b.acquire() is False
        assert a.acquire() is True  # still leading
        a.release()
        # The server drops the lock when it notices the closed connection.
        wait_for(b.acquire, 5, "the second scheduler to lead")
    finally:
        a.release()
        b.release()


def test_members_create_and_cancel_only_their_own(tmp_path):
    """Through the real app (auth on): owner recorded, others refused with 403 and nothing written."""
    from gpufleet.api.app import create_app
    from gpufleet.users.accounts import add_user
    from gpufleet.users.tokens import create_token

    settings = make_settings(tmp_path, "sqlite", auth="on", secret_key="s" * 40)
    register(settings)
    with session_scope(settings) as sess:
        add_user(sess, "ada", "member")
        add_user(sess, "bob", "member")
        add_user(sess, "vic", "viewer")
        tokens = {n: create_token(sess, n).secret for n in ("ada", "bob", "vic")}
    c = TestClient(create_app(settings))

    def h(name):
        return {"Authorization": f"Bearer {tokens[name]}"}

    assert c.post("/api/v1/trainings", json={"name": "x", "recipe": "sae"}).status_code == 401
    r = c.post("/api/v1/trainings", headers=h("vic"), json={"name": "x", "recipe": "sae", "config": TINY_SAE})
    assert r.status_code == 403
    r = c.post("/api/v1/trainings", headers=h("ada"), json={"name": "mine", "recipe": "sae", "config": TINY_SAE})
    assert r.status_code == 201, r.text
    t = r.json()
    assert t["owner"] == "ada"
    r = c.post(f"/api/v1/trainings/{t['id']}/cancel", headers=h("bob"))
    assert r.status_code == 403 and "belongs to 'ada'" in r.json()["detail"]
    assert c.get(f"/api/v1/trainings/{t['id']}", headers=h("vic")).json()["status"] == "queued"
    r = c.post(f"/api/v1/trainings/{t['id']}/cancel", headers=h("ada"))
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    # A training's events are its owner's and the admins' by default (logs and events may hold secrets).
    assert c.get(f"/api/v1/trainings/{t['id']}/events", headers=h("vic")).status_code == 403
    ev = c.get(f"/api/v1/trainings/{t['id']}/events", headers=h("ada")).json()["data"]
    assert ev[-1]["user"] == "ada" and ev[-1]["kind"] == "cancel"
    assert [x["id"] for x in c.get("/api/v1/trainings?owner=ada", headers=h("bob")).json()["data"]] == [t["id"]]
