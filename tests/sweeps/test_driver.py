"""The sweep driver against the real database and Optuna, with trainings ended by hand (no worker).

What a worker would do to a trial's training (run it, write its metrics, end
it) is written directly, so each rule of the driver is seen on its own and fast.
"""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import select, update

from gpufleet.db.models import Training, TrainingMetric
from gpufleet.db.session import session_scope, write_session
from gpufleet.sweeps.driver import advance_all
from gpufleet.engine import exitcodes
from support.fleet import make_settings, register

from .conftest import TINY_MLP


def _settings(tmp_path, backend, request):
    s = make_settings(tmp_path, backend, request, simulate="2xH100-80GB")
    register(s)
    return s


def _trainings(s, sid):
    with session_scope(s) as sess:
        rows = sess.scalars(select(Training).where(Training.sweep_id == uuid.UUID(sid))).all()
        sess.expunge_all()
        return rows


def _end(s, tid, status="succeeded", loss=None, step=None, exit_code=0):
    with write_session(s) as sess:
        t = sess.get(Training, tid)
        step = step if step is not None else t.max_steps
        if loss is not None:
            sess.add(TrainingMetric(training_id=tid, step=step, loss=loss, metrics={}))
        sess.execute(update(Training).where(Training.id == tid).values(status=status, step=step, exit_code=exit_code))


def _start(c, **kw):
    body = {"name": "lr", "recipe": "mlp", "config": TINY_MLP, "space": {"lr": [0.1, 0.01, 0.001, 0.0001]},
            "parallel": 2, **kw}
    r = c.post("/api/v1/sweeps", json=body)
    assert r.status_code == 201, r.text
    return r.json()


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True)
def test_grid_runs_parallel_at_a_time_and_names_the_best(tmp_path, backend, request, sweep_client):
    s = _settings(tmp_path, backend, request)
    c = sweep_client(s)
    sweep = _start(c)
    assert sweep["status"] == "running" and sweep["total_trials"] == 4 and sweep["trials"] == []
    advance_all(s, force=True)
    first = _trainings(s, sweep["id"])
    # Two at once, as ordinary shared trainings of the sweep's owner.
    assert len(first) == 2 and all(not t.exclusive and t.status == "queued" and t.owner == "local" for t in first)
    advance_all(s, force=True)
    assert len(_trainings(s, sweep["id"])) == 2  # a repeated round starts nothing more
    losses = {0.1: 0.9, 0.01: 0.2, 0.001: 0.5, 0.0001: 0.7}
    for _ in range(3):
        for t in _trainings(s, sweep["id"]):
            if t.status == "queued":
                _end(s, t.id, loss=losses[t.config["lr"]])
        advance_all(s, force=True)
    body = c.get(f"/api/v1/sweeps/{sweep['id']}").json()
    assert body["status"] == "succeeded", body
    assert sorted(t["params"]["lr"] for t in body["trials"]) == [0.0001, 0.001, 0.01, 0.1]
    assert all(t["state"] == "complete" for t in body["trials"])
    assert body["best"]["params"] == {"lr": 0.01} and body["best"]["metric"] == pytest.approx(0.2)
    listed = c.get("/api/v1/sweeps").json()["data"]
    assert [x["trials_by_state"] for x in listed if x["id"] == sweep["id"]] == [{"complete": 4}]


def test_sync_asha_prunes_the_worse_half_at_the_first_rung_and_resumes_the_rest(tmp_path, backend, request,
                                                                                sweep_client):
    s = _settings(tmp_path, "sqlite", request)
    c = sweep_client(s)
    sweep = _start(c, parallel=4, asha={"min_steps": 2, "reduction_factor": 2, "sync": True})
    advance_all(s, force=True)
    rows = _trainings(s, sweep["id"])
    assert len(rows) == 4 and {t.max_steps for t in rows} == {2}  # each runs to the first rung only
    losses = {0.1: 0.9, 0.01: 0.2, 0.001: 0.5, 0.0001: 0.7}
    for t in rows[:3]:
        _end(s, t.id, loss=losses[t.config["lr"]])
    advance_all(s, force=True)
    # Three wait at the rung while the fourth can still get there: no decision yet.
    states = {t["params"]["lr"]: t["state"] for t in c.get(f"/api/v1/sweeps/{sweep['id']}").json()["trials"]}
    assert sorted(states.values()) == ["rung", "rung", "rung", "running"]
    _end(s, rows[3].id, loss=losses[rows[3].config["lr"]])
    advance_all(s, force=True)
    body = c.get(f"/api/v1/sweeps/{sweep['id']}").json()
    by_lr = {t["params"]["lr"]: t for t in body["trials"]}
    assert {lr for lr, t in by_lr.items() if t["state"] == "pruned"} == {0.1, 0.0001}
    promoted = [t for t in body["trials"] if t["state"] == "running"]
    assert {t["params"]["lr"] for t in promoted} == {0.01, 0.001}
    # Promoted trials resume (same training, back in the queue) towards the next rung, 4 steps.
    assert all(t["training_status"] == "queued" and t["max_steps"] == 4 and t["rung"] == 1 for t in promoted)
    for t in promoted:
        _end(s, uuid.UUID(t["training_id"]), loss=losses[t["params"]["lr"]] / 2)
    advance_all(s, force=True)
    body = c.get(f"/api/v1/sweeps/{sweep['id']}").json()
    last = [t for t in body["trials"] if t["state"] == "running"]
    assert [t["params"]["lr"] for t in last] == [0.01] and last[0]["max_steps"] == 8 and last[0]["rung"] is None
    _end(s, uuid.UUID(last[0]["training_id"]), loss=0.05)
    advance_all(s, force=True)
    body = c.get(f"/api/v1/sweeps/{sweep['id']}").json()
    assert body["status"] == "succeeded" and body["best"]["params"] == {"lr": 0.01}
    assert body["trials_by_state"] == {"pruned": 3, "complete": 1}
    # A trial pruned at its rung shows as a pruned training too, not as one that finished.
    assert {t["training_status"] for t in body["trials"] if t["state"] == "pruned"} == {"pruned"}
    assert {t.status for t in _trainings(s, sweep["id"])} == {"pruned", "succeeded"}


def _report(s, tid, step, loss):
    """What a worker does while a training runs: it is ``running`` and wrote a metric at ``step``."""
    with write_session(s) as sess:
        sess.add(TrainingMetric(training_id=tid, step=step, loss=loss, metrics={}))
        sess.execute(update(Training).where(Training.id == tid).values(status="running", step=step))


def _events(s, tid):
    from gpufleet.db.models import TrainingEvent

    with session_scope(s) as sess:
        return [(e.kind, e.status, e.reason or "") for e in sess.scalars(
            select(TrainingEvent).where(TrainingEvent.training_id == tid).order_by(TrainingEvent.seq))]


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True)
def test_async_asha_judges_each_report_and_a_pruned_trial_frees_its_place_at_once(tmp_path, backend, request,
                                                                                  sweep_client):
    s = _settings(tmp_path, backend, request)
    c = sweep_client(s)
    sweep = _start(c, parallel=3, asha={"min_steps": 2, "reduction_factor": 2})  # rungs at steps 2 and 4 of 8
    advance_all(s, force=True)
    first = sorted(_trainings(s, sweep["id"]), key=lambda t: t.created_at)
    # Three at once, each for its whole length: no trial is stopped at a rung to wait for the others.
    assert len(first) == 3 and {t.max_steps for t in first} == {8}
    # Their ranks wait at each rung's step for the verdict (engine/rungwait.py), let past by passed_rung_step.
    assert all(t.rung_steps == [2, 4] and t.passed_rung_step is None for t in first)
    a, b, _ = first
    _report(s, a.id, 2, 0.2)
    _report(s, b.id, 1, 0.9)  # below the rung: nothing to judge yet
    advance_all(s, force=True)
    trials = {t["training_id"]: t for t in c.get(f"/api/v1/sweeps/{sweep['id']}").json()["trials"]}
    # The first at rung 0 is promoted at once and goes on in its process: still running, same attempt, not
    # cancelled, no resume, not sent back to the queue.
    ta = trials[str(a.id)]
    assert ta["state"] == "running" and ta["rung"] == 1 and "promoted at rung 0" in ta["reason"]
    # Asynchronous: judged among those there so far, and its reason says so (the first has none to beat).
    assert "the first trial to get there, so none to compare with yet" in ta["reason"], ta["reason"]
    [row_a] = [t for t in _trainings(s, sweep["id"]) if t.id == a.id]
    assert row_a.status == "running" and not row_a.cancel_requested and row_a.attempt == a.attempt
    assert row_a.passed_rung_step == 2
    assert not any("resum" in r for _, _, r in _events(s, a.id))
    assert trials[str(b.id)]["state"] == "running" and trials[str(b.id)]["rung"] == 0
    # b reaches rung 0 worse than a: pruned in that round, its training stopped, and the fourth trial takes
    # its place in the same round, while a and the third still run (nothing waits for a rung to fill).
    _report(s, b.id, 3, 0.9)
    advance_all(s, force=True)
    body = c.get(f"/api/v1/sweeps/{sweep['id']}").json()
    trials = {t["training_id"]: t for t in body["trials"]}
    assert trials[str(b.id)]["state"] == "pruned" and "GPU goes to the next trial" in trials[str(b.id)]["reason"]
    # Its rung is the one that stopped it, numbered as its reason numbers it.
    assert trials[str(b.id)]["rung"] == 0 and trials[str(b.id)]["reason"].startswith("stopped at rung 0 (step 2)")
    rows = {t.id: t for t in _trainings(s, sweep["id"])}
    assert rows[b.id].cancel_requested and rows[b.id].status == "running"  # its supervisor stops it
    assert rows[b.id].cancel_as == "pruned" and rows[b.id].passed_rung_step is None  # ... and ends it as pruned
    assert len(rows) == 4 and sum(t["state"] == "running" for t in body["trials"]) == 3
    assert any(k == "cancel" for k, _, _ in _events(s, b.id))
    # a passes rung 1 (step 4) beside nobody: promoted again, then finishes; a repeated round changes nothing.
    _report(s, a.id, 5, 0.1)
    advance_all(s, force=True)
    advance_all(s, force=True)
    ta = {t["training_id"]: t for t in c.get(f"/api/v1/sweeps/{sweep['id']}").json()["trials"]}[str(a.id)]
    assert ta["state"] == "running" and ta["rung"] is None and "promoted at rung 1" in ta["reason"]
    assert sum("promoted at rung" in r for _, _, r in _events(s, a.id)) == 2
    _end(s, a.id, loss=0.05, step=8)
    for t in rows.values():
        if t.id not in (a.id, b.id):
            _end(s, t.id, loss=0.01, step=8)  # finished before the driver saw a rung: recorded, not stopped
    _end(s, b.id, status="pruned", exit_code=None)
    advance_all(s, force=True)
    body = c.get(f"/api/v1/sweeps/{sweep['id']}").json()
    assert body["status"] == "succeeded" and body["trials_by_state"] == {"complete": 3, "pruned": 1}, body


def test_a_trial_out_of_memory_is_retried_alone_and_not_counted(tmp_path, request, sweep_client):
    s = _settings(tmp_path, "sqlite", request)
    c = sweep_client(s)
    sweep = _start(c, space={"lr": [0.1]}, parallel=1)
    advance_all(s, force=True)
    [t] = _trainings(s, sweep["id"])
    _end(s, t.id, status="failed", exit_code=exitcodes.OUT_OF_MEMORY)
    advance_all(s, force=True)
    [again] = _trainings(s, sweep["id"])
    assert again.id == t.id and again.status == "queued" and again.exclusive is True
    [trial] = c.get(f"/api/v1/sweeps/{sweep['id']}").json()["trials"]
    assert trial["state"] == "running" and trial["oom_retried"] and "alone" in trial["reason"]
    _end(s, t.id, status="failed", exit_code=exitcodes.OUT_OF_MEMORY)  # twice: it fails, once
    advance_all(s, force=True)
    body = c.get(f"/api/v1/sweeps/{sweep['id']}").json()
    assert body["status"] == "failed" and body["trials"][0]["state"] == "failed"


def test_cancel_cancels_every_trial(tmp_path, request, sweep_client):
    s = _settings(tmp_path, "sqlite", request)
    c = sweep_client(s)
    sweep = _start(c, parallel=3)
    advance_all(s, force=True)
    r = c.post(f"/api/v1/sweeps/{sweep['id']}/cancel")
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    assert {t.status for t in _trainings(s, sweep["id"])} == {"cancelled"}
    advance_all(s, force=True)
    assert len(_trainings(s, sweep["id"])) == 3  # nothing new after a cancel
    assert c.post(f"/api/v1/sweeps/{sweep['id']}/cancel").status_code == 200  # idempotent
    assert c.post(f"/api/v1/sweeps/{uuid.uuid4()}/cancel").status_code == 404


@pytest.mark.parametrize("body, words", [
    ({"space": {"nope": [1, 2]}}, "no config field"),
    ({"space": {"lr": [0.1, -5.0]}}, "lr=-5"),
    ({"space": {"lr": {"low": 0.1, "high": 0.5}}}, "a grid needs a list, or a range with step or count"),
    ({"method": "random"}, "needs trials"),
    ({"recipe": "nope"}, "unknown recipe"),
    ({"host": "nowhere"}, "nowhere"),
    ({"space": {"lr": {"low": 0.0, "high": 1.0, "log": True, "count": 3}}}, "log range needs low above 0"),
])
def test_a_bad_sweep_is_refused_and_nothing_is_written(tmp_path, request, sweep_client, body, words):
    s = _settings(tmp_path, "sqlite", request)
    c = sweep_client(s)
    full = {"name": "bad", "recipe": "mlp", "config": TINY_MLP, "space": {"lr": [0.1]}, **body}
    r = c.post("/api/v1/sweeps", json=full)
    assert 400 <= r.status_code < 500 and words in r.text, r.text
    assert c.get("/api/v1/sweeps").json()["count"] == 0


def test_a_script_sweep_puts_each_parameter_into_argv(tmp_path, request, sweep_client):
    from gpufleet.trainings.archive import pack
    from gpufleet.trainings.code import store

    s = _settings(tmp_path, "sqlite", request)
    c = sweep_client(s)
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print('hi')\n")
    with write_session(s) as sess:
        info, _ = store(sess, s, pack(tmp_path / "code"), "local")
    body = {"name": "script", "space": {"lr": [0.1, 0.01], "batch": [32]}, "parallel": 4, "memory_mb": 1024,
            "script": {"code": info.hash, "argv": ["python", "train.py", "--lr={lr}", "--batch", "{batch}", "{x}"]}}
    r = c.post("/api/v1/sweeps", json=body)
    assert r.status_code == 201, r.text
    advance_all(s, force=True)
    rows = _trainings(s, r.json()["id"])
    # One upload for every trial; unknown braces stay as they are.
    assert sorted(t.argv for t in rows) == [["python", "train.py", "--lr=0.01", "--batch", "32", "{x}"],
                                            ["python", "train.py", "--lr=0.1", "--batch", "32", "{x}"]]
    assert {t.kind for t in rows} == {"script"} and {t.code_hash for t in rows} == {info.hash}
    assert all(t.exclusive for t in rows)  # a user's code holds its GPU alone, as for `gpufleet run`
    unused = c.post("/api/v1/sweeps", json={**body, "space": {"lr": [0.1], "depth": [2]}})
    assert unused.status_code == 422 and "{depth}" in unused.text
    sync = c.post("/api/v1/sweeps", json={**body, "asha": {"min_steps": 2, "sync": True}})
    assert sync.status_code == 422 and "synchronous early stopping (asha.sync) needs a recipe" in sync.text
    asha = c.post("/api/v1/sweeps", json={**body, "asha": {"min_steps": 2, "max_steps": 8}})
    assert asha.status_code == 201, asha.text  # asynchronous halving stops a script where it runs: no restart
    # Unsaid, 1 in 3 goes on at each rung (Hyperband's eta), and the sweep keeps the factor it was made with.
    assert asha.json()["spec"]["asha"]["reduction_factor"] == 3
