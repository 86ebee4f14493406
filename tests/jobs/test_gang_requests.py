"""Asking for a training across hosts: what is refused (4xx, nothing written), where the
scheduler puts a gang, and what a queued gang says it waits for."""

from __future__ import annotations

import uuid

import pytest
from gpufleet.db.models import GangMember, GPUAllocation, Training
from gpufleet.db.session import session_scope
from gpufleet.scheduling.gang import plan
from gpufleet.scheduling.scheduler import schedule_pending
from sqlalchemy import func, select

from support.fleet import make_settings, register, unique

pytestmark = [pytest.mark.postgres]

MLP = {"max_steps": 2, "global_batch_size": 8}


@pytest.fixture
def fleet(tmp_path, request):
    """Hosts a and b with 4 simulated GPUs each, c with 2; no worker."""
    out = []
    for name, sim in (("a", "4xH100-80GB"), ("b", "4xH100-80GB"), ("c", "2xA100-40GB")):
        s = make_settings(tmp_path / name, "postgresql", request, simulate=sim, host_name=unique(name))
        register(s)
        out.append(s)
    return out


def _count(s, model):
    with session_scope(s) as sess:
        return sess.scalar(select(func.count()).select_from(model))


@pytest.mark.parametrize("extra, status, words", [
    ({"world_size": 8, "hosts": 3, "gpus_per_host": 4}, 422, "3 × 4 = 12, but world_size is 8"),
    ({"world_size": 6, "hosts": 4}, 422, "does not split evenly over 4 hosts"),
    ({"world_size": 6, "gpus_per_host": 4}, 422, "not a multiple of gpus_per_host 4"),
    ({"hosts": ["nowhere", "{a}"], "gpus_per_host": 2}, 404, "nowhere"),
    ({"hosts": ["{a}", "{a}"], "gpus_per_host": 2}, 422, "listed twice"),
    ({"hosts": ["{a}", "{c}"], "gpus_per_host": 4}, 422, "it can never hold 4 ranks"),
    ({"hosts": 3, "gpus_per_host": 4}, 422, "the fleet has 2 host(s) with 4 or more GPUs"),
    ({"world_size": 11, "spread": "auto"}, 422, "more GPUs than the whole fleet has (10)"),
    ({"world_size": 4, "spread": "auto", "hosts": 2}, 422, "give either spread or hosts/gpus_per_host"),
    ({"hosts": 2, "gpus_per_host": 2, "gpu_ids": [0, 1]}, 422, "gpu_ids are per host"),
    ({"hosts": 2, "gpus_per_host": 2, "host": "{a}"}, 422, "hosts as a list of host names"),
    ({"hosts": 0, "gpus_per_host": 2}, 422, "hosts"),
    ({"hosts": 2, "gpus_per_host": 2, "config": {"parallel_mode": "proportional"}}, 422,
     "a training across hosts takes equal shares"),
])
def test_bad_gang_requests_are_refused_and_nothing_is_written(fleet, client_for, extra, status, words):
    a, b, c3 = fleet
    names = {"a": a.host_name, "b": b.host_name, "c": c3.host_name}
    body = {"name": "g", "recipe": "mlp", "config": MLP}
    for k, v in extra.items():
        if k == "config":
            body[k] = {**MLP, **v}
            continue
        body[k] = [x.format(**names) for x in v] if isinstance(v, list) and k == "hosts" else (
            v.format(**names) if isinstance(v, str) else v)
    c = client_for(a)
    r = c.post("/api/v1/trainings", json=body)
    assert r.status_code == status, r.text
    assert words in r.text, r.text
    assert _count(a, Training) == 0 and _count(a, GangMember) == 0


def test_plan_takes_the_fewest_hosts_and_says_what_is_missing():
    free = {"a": [0, 1, 2, 3], "b": [0, 1], "c": [1, 2, 3]}
    parts, _ = plan(free, 3, {"spread": "auto"})
    assert [(p.host, p.gpus) for p in parts] == [("c", [1, 2, 3])]  # one host fits: the tightest
    parts, _ = plan(free, 6, {"spread": "auto"})
    assert [(p.host, p.gpus) for p in parts] == [("a", [0, 1, 2, 3]), ("c", [1, 2])]
    parts, why = plan(free, 8, {"hosts": 2, "gpus_per_host": 4})
    assert parts is None
    assert why == "needs 2 hosts × 4 free GPUs; host b has 2 free; host c has 3 free; a has enough"
    parts, why = plan(free, 10, {"spread": "auto"})
    assert parts is None and "the fleet has 9 free (a: 4, b: 2, c: 3)" in why
    parts, _ = plan(free, 4, {"host_names": ["b", "a"], "gpus_per_host": 2})
    assert [(p.host, p.gpus) for p in parts] == [("b", [0, 1]), ("a", [0, 1])]  # rank 0 on the first named


def test_a_gang_is_placed_whole_or_waits_with_its_reason(fleet, client_for):
    a, b, c3 = fleet
    c = client_for(a)
    hold = c.post("/api/v1/trainings", json={"name": "hold", "recipe": "mlp", "config": MLP,
                                             "host": b.host_name, "gpu_ids": [0, 1]}).json()["id"]
    schedule_pending(a)
    r = c.post("/api/v1/trainings", json={"name": "g", "recipe": "mlp", "config": MLP,
                                          "hosts": [a.host_name, b.host_name], "gpus_per_host": 4})
    assert r.status_code == 201, r.text
    gid = r.json()["id"]
    res = schedule_pending(a)
    why = res.waiting[uuid.UUID(gid)]
    assert why.startswith(f"needs 2 hosts × 4 free GPUs; host {b.host_name} has 2 free"), why
    assert f"held by training {hold}" in why
    body = c.get(f"/api/v1/trainings/{gid}").json()
    assert body["status"] == "queued" and body["wait_reason"] == why
    with session_scope(a) as sess:
        assert sess.scalar(select(func.count()).select_from(GPUAllocation)
                           .where(GPUAllocation.training_id == gid)) == 0
    assert c.post(f"/api/v1/trainings/{hold}/cancel").status_code == 200
    schedule_pending(a)
    body = c.get(f"/api/v1/trainings/{gid}").json()
    assert body["status"] == "scheduled" and body["world_size"] == 8
    with session_scope(a) as sess:
        rows = sess.execute(select(GangMember.host_name, GangMember.node_rank, GangMember.first_rank,
                                   GangMember.gpu_ids).where(GangMember.training_id == gid)
                            .order_by(GangMember.node_rank)).all()
        held = sess.execute(select(GPUAllocation.host_id, func.count()).where(
            GPUAllocation.training_id == gid, GPUAllocation.released_at.is_(None))
            .group_by(GPUAllocation.host_id)).all()
    assert [tuple(r) for r in rows] == [(a.host_name, 0, 0, [0, 1, 2, 3]), (b.host_name, 1, 4, [0, 1, 2, 3])]
    assert sorted(n for _, n in held) == [4, 4]
    # spread: auto on a fleet where one host fits: an ordinary one-host training.
    r = c.post("/api/v1/trainings", json={"name": "one", "recipe": "mlp", "config": MLP, "world_size": 2,
                                          "spread": "auto"})
    oid = r.json()["id"]
    schedule_pending(a)
    body = c.get(f"/api/v1/trainings/{oid}").json()
    assert body["status"] == "scheduled" and body["host_name"] == c3.host_name


def test_a_straggler_across_hosts_is_named_with_its_host(fleet, tmp_path):
    import json
    from datetime import timedelta

    from gpufleet.db.models import TrainingEvent
    from gpufleet.db.types import utcnow
    from gpufleet.jobs.metrics_sink import MetricsSink

    a = fleet[0]
    tid = uuid.uuid4()
    with session_scope(a) as sess:
        sess.add(Training(id=tid, name="s", owner="o", recipe="mlp", config={}, status="running", world_size=4,
                          lease_owner="w", lease_expires_at=utcnow() + timedelta(seconds=30)))
    progress = tmp_path / "p.jsonl"
    progress.write_text("".join(json.dumps({"type": "step", "step": s, "loss": 1.0,
                                            "rank_step_times": [0.01, 0.01, 0.01, 0.09]}) + "\n"
                                for s in range(1, 6)))
    with session_scope(a) as sess:
        row = sess.get(Training, tid)
    sink = MetricsSink(a, row, "w", progress, "h")
    sink.rank_hosts = ["a", "a", "b", "b"]
    sink.pump(final=True)
    with session_scope(a) as sess:
        warnings = sess.execute(select(TrainingEvent.reason, TrainingEvent.data).where(
            TrainingEvent.training_id == tid, TrainingEvent.kind == "warning")).all()
    assert [w.reason.split(":")[0] for w in warnings] == ["rank 3 (host b) is a straggler"]
    assert warnings[0].data["host"] == "b"


def test_the_network_settings_reach_the_launcher(tmp_path):
    from gpufleet.config import load_settings
    from gpufleet.jobs.rendezvous import advertised_address, launch_env

    s = load_settings(data_dir=tmp_path, network_interface="ib0", advertise_address="10.1.2.3")
    env = launch_env(s, s, uuid.uuid4())
    assert env["NCCL_SOCKET_IFNAME"] == "ib0" and env["GLOO_SOCKET_IFNAME"] == "ib0"
    assert advertised_address(s) == "10.1.2.3"
    plain = load_settings(data_dir=tmp_path)
    assert "NCCL_SOCKET_IFNAME" not in launch_env(plain, plain, uuid.uuid4())
    assert advertised_address(plain)  # the host name resolved, or loopback


def test_a_gang_waiting_to_be_placed_again_names_a_host_it_ran_on_that_went_offline(fleet, client_for):
    from sqlalchemy import update

    from gpufleet.db.models import Host
    from gpufleet.db.session import write_session
    from gpufleet.db.types import utcnow

    a, b, _c = fleet
    c = client_for(a)
    gid = c.post("/api/v1/trainings", json={"name": "g", "recipe": "mlp", "config": MLP, "hosts": 2,
                                            "gpus_per_host": 4}).json()["id"]
    schedule_pending(a)
    assert c.get(f"/api/v1/trainings/{gid}").json()["status"] == "scheduled"
    # Its attempt ended and it went back to the queue; then host b went offline.
    with write_session(a) as sess:
        sess.execute(update(GPUAllocation).where(GPUAllocation.training_id == uuid.UUID(gid))
                     .values(released_at=utcnow()))
        sess.execute(update(Training).where(Training.id == uuid.UUID(gid)).values(status="queued", host_id=None))
        sess.execute(update(Host).where(Host.name == b.host_name).values(status="offline"))
    why = schedule_pending(a).waiting[uuid.UUID(gid)]
    assert why.startswith("needs 2 hosts × 4 free GPUs"), why
    assert f"host {b.host_name}, where it ran, is offline" in why, why
    assert c.get(f"/api/v1/trainings/{gid}").json()["wait_reason"] == why


def test_a_gang_does_not_take_gpus_booked_by_another_and_says_whose(fleet, client_for):
    from datetime import timedelta

    from gpufleet.bookings import service
    from gpufleet.db.session import write_session
    from gpufleet.db.types import utcnow
    from gpufleet.users.accounts import add_user

    a, b, _ = fleet
    now = utcnow().replace(second=0, microsecond=0)
    with write_session(a) as sess:  # dana's booking of two of b's GPUs, from now for two hours
        add_user(sess, "dana", "member")
        booking = service.create(sess, service.Actor("admin", admin=True), service.Wanted(
            now, now + timedelta(hours=2), 2, host=b.host_name, gpu_indices=(2, 3), owner="dana"), a, utcnow())
    c = client_for(a)
    r = c.post("/api/v1/trainings", json={"name": "g", "recipe": "mlp", "config": MLP,
                                          "hosts": [a.host_name, b.host_name], "gpus_per_host": 4})
    assert r.status_code == 201, r.text
    gid = uuid.UUID(r.json()["id"])
    why = schedule_pending(a).waiting[gid]
    assert f"host {b.host_name} has 2 free" in why and "booked by dana until" in why, why
    with session_scope(a) as sess:
        assert sess.scalar(select(func.count()).select_from(GPUAllocation)
                           .where(GPUAllocation.training_id == gid)) == 0
    with write_session(a) as sess:
        service.cancel(sess, service.Actor("dana", admin=False), booking.id, utcnow())
    assert gid in dict(schedule_pending(a).scheduled)
