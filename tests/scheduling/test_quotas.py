"""Quotas with real worker processes: a user at their GPU quota waits with the reason; others go first.

The product's app (sign-in on), the scheduler loop and a real Celery worker
on a simulated 4-GPU host, on the embedded default (SQLite + filesystem
broker) and on the fleet (PostgreSQL + Redis).
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from gpufleet.db.session import session_scope
from gpufleet.users.accounts import add_user, set_permission
from gpufleet.users.tokens import create_token
from support.people import SECRET, bearer

from support.fleet import FINAL, TINY_SAE, get_training, make_settings, register, unique, wait_status

pytestmark = pytest.mark.slow

LONG = dict(TINY_SAE, max_steps=1_000_000, checkpoint_every=1_000_000)


def test_user_at_gpu_quota_waits_with_the_reason_and_another_user_starts_first(
    tmp_path, backend, request, workers, scheduler
):
    settings = make_settings(tmp_path, backend, request, simulate="4xH100-80GB", auth="on", secret_key=SECRET)
    register(settings)
    alice, bob, root = unique("alice"), unique("bob"), unique("root")
    with session_scope(settings) as sess:
        add_user(sess, alice)
        add_user(sess, bob)
        add_user(sess, root, "admin")
        for member in (alice, bob):  # their trainings below ask not to be preempted
            set_permission(sess, member, "non_preemptible", True)
        tok = {n: create_token(sess, n).secret for n in (alice, bob, root)}
    w = workers(settings)
    c = TestClient(create_app_for(settings))
    r = c.put(f"/api/v1/users/{alice}/quota", headers=bearer(tok[root]), json={"max_gpus": 1})
    assert r.status_code == 200, r.text
    started = []
    try:
        def submit(owner: str, name: str) -> str:
            r = c.post("/api/v1/trainings", headers=bearer(tok[owner]),
                       # Not preemptible: such a training never borrows GPUs beyond its owner's quota.
                       json={"name": name, "recipe": "sae", "config": LONG, "host": settings.host_name,
                             "preemptible": False})
            assert r.status_code == 201, r.text
            started.append((owner, r.json()["id"]))
            return r.json()["id"]

        a1 = submit(alice, "a1")
        a2 = submit(alice, "a2")  # older than bob's: plain priority-then-age would start it first
        b1 = submit(bob, "b1")
        scheduler(settings)
        wait_status(c_as(c, tok[alice]), a1, ("running",), 120)
        wait_status(c_as(c, tok[bob]), b1, ("running",), 120)
        body = get_training(c_as(c, tok[alice]), a2)
        # Two of the four GPUs are free, yet alice's second training waits for her quota.
        assert body["status"] == "queued", (body, w.output())
        assert body["wait_reason"].startswith(f"{alice} holds 1 of 1 GPUs in their quota"), body
        # It never fails for it: once alice's first training ends, the second starts.
        assert c.post(f"/api/v1/trainings/{a1}/cancel", headers=bearer(tok[alice])).status_code == 200
        wait_status(c_as(c, tok[alice]), a2, ("running",), 120)
    finally:
        for owner, tid in started:
            c.post(f"/api/v1/trainings/{tid}/cancel", headers=bearer(tok[owner]))
        for owner, tid in started:
            wait_status(c_as(c, tok[owner]), tid, FINAL, 120)


def create_app_for(settings):
    from gpufleet.api.app import create_app

    return create_app(settings)


class c_as:  # reads like a function at the call site
    """The client with one user's token on every GET (wait helpers take a bare client)."""

    def __init__(self, client: TestClient, token: str):
        self.client, self.headers = client, bearer(token)

    def get(self, url: str):
        return self.client.get(url, headers=self.headers)
