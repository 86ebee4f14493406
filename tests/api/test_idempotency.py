"""``Idempotency-Key`` on creates, on a real uvicorn server with sign-in, PostgreSQL and Redis.

The same key and body give the first answer back, another body a 409; a key
belongs to one user and one endpoint; a refused request leaves its key free.
A burst of creates whose first tries time out in the client, retried by the
Python client with their keys, makes each training exactly once.
"""

from __future__ import annotations

import json
import threading
import time
import uuid

import httpx
import pytest
from sqlalchemy import func, select

from gpufleet.client import Client
from gpufleet.db.models import Sweep, Training
from gpufleet.db.session import session_scope

from support.fleet import make_settings, register
from support.people import make_people

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

SECRET = "idempotency-tests-secret-" + "z" * 32
MLP = {"max_steps": 3, "global_batch_size": 8, "log_every": 1}


@pytest.fixture
def server(tmp_path, request, product_api):
    # Room for the whole burst at once: it is about answers that never arrive, not about admission.
    s = make_settings(tmp_path, "postgresql", request, auth="on", secret_key=SECRET, simulate="2xH100-80GB",
                      max_concurrent_requests=256)
    register(s)
    people = make_people(s, suffix="-" + uuid.uuid4().hex[:6])
    return s, product_api(s), people


def _count(s, model, **where) -> int:
    with session_scope(s) as sess:
        stmt = select(func.count()).select_from(model)
        for k, v in where.items():
            stmt = stmt.where(getattr(model, k) == v)
        return sess.execute(stmt).scalar_one()


def _post(url: str, token: str, path: str, body, key: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    if key is not None:
        headers["Idempotency-Key"] = key
    content = body if isinstance(body, str) else json.dumps(body)
    # A first create traces its recipe's memory estimate cold: a minute on a loaded machine.
    return httpx.post(f"{url}{path}", content=content, headers=headers, timeout=300)


def test_the_same_key_gives_the_first_answer_and_another_body_a_conflict(server):
    s, url, people = server
    body = {"name": "once", "recipe": "mlp", "config": MLP, "gpu_ids": [0], "host": s.host_name}
    first = _post(url, people.alice, "/api/v1/trainings", body, "key-1")
    assert first.status_code == 201, first.text
    # The same body, its keys in another order and other spacing: the same request.
    again = _post(url, people.alice, "/api/v1/trainings", json.dumps(dict(reversed(body.items())), indent=2), "key-1")
    assert again.status_code == 201 and again.json()["id"] == first.json()["id"], again.text
    assert again.headers["idempotent-replayed"] == "true"
    other = _post(url, people.alice, "/api/v1/trainings", {**body, "name": "twice"}, "key-1")
    assert other.status_code == 409 and "another request body" in other.json()["detail"], other.text
    # Another user's key of the same name is theirs; no key, no replay.
    bobs = _post(url, people.bob, "/api/v1/trainings", body, "key-1")
    assert bobs.status_code == 201 and bobs.json()["id"] != first.json()["id"], bobs.text
    assert _post(url, people.alice, "/api/v1/trainings", body, None).status_code == 201
    assert _count(s, Training, name="once") == 3 and _count(s, Training, name="twice") == 0
    # A refused request wrote nothing and keeps nothing: its key is free for the corrected request.
    bad = {**body, "name": "fixed", "config": {**MLP, "max_steps": -1}}
    assert _post(url, people.alice, "/api/v1/trainings", bad, "key-2").status_code == 422
    fixed = _post(url, people.alice, "/api/v1/trainings", {**bad, "config": MLP}, "key-2")
    assert fixed.status_code == 201, fixed.text
    assert _post(url, people.alice, "/api/v1/trainings", {**bad, "config": MLP}, "key-2").json()["id"] == \
        fixed.json()["id"]
    assert _post(url, people.alice, "/api/v1/trainings", body, "k" * 256).status_code == 400


def test_batches_sessions_and_sweeps_take_a_key_too(server):
    s, url, people = server
    batch = {"items": [{"name": "b1", "recipe": "mlp", "config": MLP}, {"name": "b2", "recipe": "mlp",
                                                                            "config": MLP}]}
    session = {"gpus": 1, "hours": 1, "name": "idem-session"}
    sweep = {"name": "idem-sweep", "recipe": "mlp", "config": MLP, "space": {"lr": [0.1, 0.01]}, "parallel": 1}
    for path, body in (("/api/v1/trainings/batch", batch), ("/api/v1/sessions", session),
                       ("/api/v1/sweeps", sweep)):
        # (a session runs its owner's own code: the admin may)
        one = _post(url, people.admin, path, body, f"key-{path}")
        two = _post(url, people.admin, path, body, f"key-{path}")
        assert one.status_code == two.status_code == 201, (path, one.text, two.text)
        assert one.json() == two.json() and two.headers["idempotent-replayed"] == "true", path
    assert _count(s, Training, name="b1") == 1 and _count(s, Training, name="b2") == 1
    assert _count(s, Training, name="idem-session") == 1
    assert _count(s, Sweep, name="idem-sweep") == 1


class _Impatient(Client):
    """A client whose first try of each create gives up after ``first_timeout_s`` (as a client on a busy
    host does), then retries as the product's client retries; it counts what came back replayed."""

    first_timeout_s = 0.1

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.tries: dict[str, int] = {}
        self.replayed = 0

    def _sleep(self, seconds: float) -> None:
        super()._sleep(min(seconds, 0.5))

    def _send(self, method, path, **kw):
        r = super()._send(method, path, **kw)
        self.replayed += r.headers.get("idempotent-replayed") == "true"
        return r


def test_a_burst_of_creates_with_client_timeouts_makes_no_duplicates(server):
    s, url, people = server
    n = 16
    results: dict[int, str] = {}
    clients: list[_Impatient] = []
    errors: list[BaseException] = []

    def one(i: int) -> None:
        gf = _Impatient(url, people.alice, create_retries=30)
        clients.append(gf)
        real = gf._http.request
        first = set()

        def request(method, path, **kw):
            key = (kw.get("headers") or {}).get("Idempotency-Key")
            if key is not None:
                gf.tries[key] = gf.tries.get(key, 0) + 1
            if key is not None and key not in first:
                first.add(key)
                kw["timeout"] = gf.first_timeout_s  # this try's answer never arrives
            return real(method, path, **kw)

        gf._http.request = request
        try:
            t = gf.create_training(name=f"burst-{i}", recipe="mlp", config=MLP)
            results[i] = str(t.id)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            gf.close()

    # The recipe's memory estimate traced once, so the burst times creates, not that first trace.
    assert _post(url, people.alice, "/api/v1/trainings", {"name": "warm", "recipe": "mlp", "config": MLP},
                 None).status_code == 201
    began = time.monotonic()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    assert len(results) == n and len(set(results.values())) == n
    timed_out = sum(1 for c in clients for tries in c.tries.values() if tries > 1)
    replayed = sum(c.replayed for c in clients)
    print(f"{n} creates in {time.monotonic() - began:.1f}s: {timed_out} timed out in the client and were sent "
          f"again; {replayed} of those had been "
          f"made already and were answered from their key")
    assert timed_out > 0 and replayed > 0, (timed_out, replayed)
    for i in range(n):
        assert _count(s, Training, name=f"burst-{i}") == 1, i
