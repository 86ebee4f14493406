"""Selection on simulated fleets: real database rows, real sampler, simulated NVML."""

from __future__ import annotations

import uuid

import pytest

from gpufleet.db.models import GPU, GPUAllocation, Host, Training
from gpufleet.db.session import session_scope
from gpufleet.devices import simstate
from gpufleet.scheduling.inputs import availability_by_gpu, fleet_state
from gpufleet.scheduling.choose import choose_for_scheduler
from gpufleet.scheduling.recommend import recommend
from gpufleet.scheduling.types import GiB, SelectionRequest
from gpufleet.scheduling.validate import validate_selection
from sqlalchemy import select

from scheduling.conftest import sample_into_live

pytestmark = pytest.mark.parametrize(
    "sim_host", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True
)


def _fleet(settings, host=None):
    with session_scope(settings) as sess:
        return fleet_state(sess, settings, settings, settings, settings, host=host)


def test_nvlink_pairs_two_gpus_get_a_connected_pair(sim_host) -> None:
    s = sim_host("nvlink-pairs")
    # Someone else's job on GPU 0 leaves GPU 1 without its NVLink partner.
    simstate.add_foreign_process(s, 0, 20 * GiB, user="bob", name="python train.py")
    sample_into_live(s)
    rec = recommend(SelectionRequest(10 * GiB, 2, host=s.host_name), _fleet(s))
    top = rec.top
    assert top is not None and top.connection == "nvlink"
    assert top.gpu_indexes in {(2, 3), (4, 5), (6, 7)}
    assert all(0 not in c.gpu_indexes for c in rec.candidates)


def test_pcie_two_gpus_get_a_same_switch_pair(sim_host) -> None:
    s = sim_host("pcie")
    rec = recommend(SelectionRequest(10 * GiB, 2, host=s.host_name, max_candidates=20), _fleet(s))
    top = rec.top
    assert top is not None and top.connection == "pcie-switch"
    assert top.gpu_indexes in {(0, 1), (2, 3), (4, 5), (6, 7)}
    assert any("one PCIe switch" in r for r in top.reasons)


def test_foreign_process_makes_a_gpu_foreign_busy(sim_host) -> None:
    s = sim_host("nvlink-pairs", "4xH100-80GB")
    pid = simstate.add_foreign_process(s, 2, 8 * GiB, user="carol", name="jupyter")
    sample_into_live(s)
    with session_scope(s) as sess:
        avail = availability_by_gpu(sess, s, s, s, s)
    a = avail[(s.host_name, 2)]
    assert a.state == "foreign-busy"
    assert "carol" in a.reason and f"pid {pid}" in a.reason
    assert avail[(s.host_name, 1)].state == "free"
    # The same GPU comes back once the process is gone.
    simstate.remove_foreign_process(s, pid)
    sample_into_live(s)
    with session_scope(s) as sess:
        assert availability_by_gpu(sess, s, s, s, s)[(s.host_name, 2)].state == "free"


def test_lost_gpu_and_drained_gpu_and_reservation(sim_host) -> None:
    s = sim_host("nvlink-pairs", "4xH100-80GB")
    simstate.lose_gpu(s, 3)
    sample_into_live(s)
    with session_scope(s) as sess:
        host = sess.scalar(select(Host).where(Host.name == s.host_name))
        gpus = {g.index: g for g in sess.scalars(select(GPU).where(GPU.host_id == host.id))}
        gpus[1].drained, gpus[1].drain_reason = True, "fan"
        t = Training(id=uuid.uuid4(), name="big-run", owner="alice", recipe="sae", config={}, status="running")
        sess.add(t)
        sess.flush()
        sess.add(GPUAllocation(training_id=t.id, gpu_id=gpus[0].id, host_id=host.id, gpu_index=0,
                               exclusive=True, reserved_memory=GiB))
    with session_scope(s) as sess:
        avail = availability_by_gpu(sess, s, s, s, s)
        fleet = fleet_state(sess, s, s, s, s)
    assert avail[(s.host_name, 3)].state == "unhealthy"
    assert avail[(s.host_name, 1)].state == "drained" and "fan" in avail[(s.host_name, 1)].reason
    assert avail[(s.host_name, 0)].state == "busy" and "big-run of alice" in avail[(s.host_name, 0)].reason
    rec = recommend(SelectionRequest(GiB, 2, host=s.host_name), fleet)
    assert rec.top is None and f"host {s.host_name} has one free" in (rec.wait_reason or "")
    v = validate_selection(fleet, [0, 1, 3, 2, 9], host=s.host_name, memory_bytes=GiB)
    codes = {p.code for p in v.problems}
    assert codes == {"busy", "drained", "unhealthy", "unknown-gpu"}
    assert f"GPU 9 does not exist on host {s.host_name}; it has GPUs 0–3" in [p.message for p in v.problems]


def test_never_fitting_request_is_refused(sim_host) -> None:
    s = sim_host("nvlink-all", "4xH100-80GB")
    fleet = _fleet(s, host=s.host_name)
    assert f"host {s.host_name} has 4" in recommend(SelectionRequest(GiB, 8, host=s.host_name), fleet).refused
    refused = recommend(SelectionRequest(81 * GiB, 1, host=s.host_name), fleet).refused
    assert f"the largest GPU on host {s.host_name} has 80.0 GiB" in refused


def test_scheduler_hook_skips_foreign_busy_and_keeps_pairs(sim_host) -> None:
    s = sim_host("nvlink-pairs", "4xH100-80GB")
    simstate.add_foreign_process(s, 2, 30 * GiB)
    sample_into_live(s)
    indexes, why = choose_for_scheduler([0, 1, 2, 3], 2, GiB, host_name=s.host_name, settings=s)
    assert indexes == [0, 1] and "NVLink" in why
    assert choose_for_scheduler([2, 3], 2, GiB, host_name=s.host_name, settings=s) is None


def test_new_xid_error_makes_a_gpu_unhealthy(sim_host) -> None:
    from gpufleet.scheduling.inputs import reset_error_baseline

    s = sim_host("nvlink-pairs", "4xH100-80GB")
    reset_error_baseline(s.host_name)
    with session_scope(s) as sess:
        assert availability_by_gpu(sess, s, s, s, s)[(s.host_name, 1)].state == "free"  # the baseline
    from gpufleet.devices.backend import device_backend
    from gpufleet.telemetry.live import LOCAL
    from gpufleet.telemetry.sampler import NvmlSampler

    sampler = NvmlSampler(s, s, device_backend(s))
    try:
        simstate.inject_xid(s, 1, 79)
        LOCAL.put_host(s.host_name, sampler.sample())
    finally:
        sampler.close()
    with session_scope(s) as sess:
        a = availability_by_gpu(sess, s, s, s, s)[(s.host_name, 1)]
    assert a.state == "unhealthy" and "new XID error" in a.reason


def test_a_host_whose_agent_stopped_beating_is_unhealthy(sim_host) -> None:
    from datetime import timedelta

    from gpufleet.db.types import utcnow

    s = sim_host("nvlink-pairs", "4xH100-80GB")
    with session_scope(s) as sess:
        host = sess.scalar(select(Host).where(Host.name == s.host_name))
        host.last_heartbeat = utcnow() - timedelta(minutes=10)
    with session_scope(s) as sess:
        a = availability_by_gpu(sess, s, s, s, s)[(s.host_name, 0)]
    assert a.state == "unhealthy" and "offline" in a.reason


def test_scheduler_wait_reason_says_what_is_missing(sim_host) -> None:
    from gpufleet.scheduling.choose import scheduler_wait_reason

    s = sim_host("nvlink-pairs", "4xH100-80GB")
    simstate.add_foreign_process(s, 2, 30 * GiB, user="bob")
    sample_into_live(s)
    why = scheduler_wait_reason([2, 3], 2, 4 * GiB, host_name=s.host_name, settings=s)
    assert why.startswith(f"needs 2 GPUs with 4.0 GiB free on one host; host {s.host_name} has one free")
    assert "bob" in why
