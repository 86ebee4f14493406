"""The sampler on the simulated NVML: fields, refusals asked once, lost GPUs, XIDs, ECC, owners."""

from __future__ import annotations

import uuid

import pytest

from gpufleet.config import load_settings
from gpufleet.devices import simstate
from gpufleet.telemetry.aggregate import aggregate_by_host, compute_aggregated
from gpufleet.telemetry.owners import TrainingOwners
from gpufleet.telemetry.sample import GPUSample
from gpufleet.telemetry.vendors import HostSampler


@pytest.fixture
def mixed(tmp_path):
    return load_settings(data_dir=tmp_path / "d", simulate="2xH100-80GB+1xMI300X", host_name="sim-a",
                         slow_sample_interval_s=0.2)


def by_index(samples):
    return {s.index: s for s in samples}


def test_every_gpu_reports_its_fields_in_fixed_units(mixed):
    s = by_index(HostSampler(mixed).sample())
    assert sorted(s) == [0, 1, 2]
    h = s[0]
    assert h.vendor == "nvidia" and h.uuid and h.name.startswith("NVIDIA H100")
    assert h.memory_total == 80 * 1024**3 and h.memory_used + h.memory_free == h.memory_total
    assert h.utilization == 0 and h.temperature is not None and 0 < h.power_draw < h.power_limit <= 700
    assert h.sm_clock and h.mem_clock and h.pcie_tx is not None and h.ecc_errors == 0 and h.xid_errors == 0
    assert h.timestamp == s[1].timestamp == s[2].timestamp  # one timestamp per round
    amd = s[2]
    assert amd.vendor == "amd" and amd.memory_total and amd.utilization is not None
    assert amd.pcie_tx is None and amd.xid_errors is None  # what the vendor cannot give is None


def test_a_refused_field_is_none_and_not_asked_again(mixed):
    simstate.refuse_field(mixed, 1, "temperature", "not_supported")
    hs = HostSampler(mixed)
    nvml = hs.nvml_sampler.nvml
    calls = []
    real = nvml.nvmlDeviceGetTemperature
    nvml.nvmlDeviceGetTemperature = lambda h, sensor: calls.append(h.index) or real(h, sensor)
    try:
        for _ in range(5):
            s = by_index(hs.sample())
            assert s[1].temperature is None and s[0].temperature is not None
    finally:
        del nvml.nvmlDeviceGetTemperature
    assert calls.count(1) == 1 and calls.count(0) == 5
    assert hs.disabled_fields >= 1


def test_a_lost_gpu_is_reported_and_the_others_keep_sampling(mixed):
    hs = HostSampler(mixed)
    hs.nvml_sampler.reopen_lost_s = 0.0
    simstate.lose_gpu(mixed, 0)
    s = by_index(hs.sample())
    assert s[0].lost and s[0].utilization is None and "lost" in s[0].error
    assert not s[1].lost and s[1].memory_total
    simstate.restore_gpu(mixed, 0)
    s = by_index(hs.sample())
    assert not s[0].lost and s[0].memory_total == 80 * 1024**3


def test_xid_and_ecc_errors_are_counted(mixed):
    import time

    hs = HostSampler(mixed)
    simstate.inject_xid(mixed, 1, 79)
    simstate.inject_xid(mixed, 1, 48)
    simstate.set_ecc_errors(mixed, 0, corrected=3, uncorrected=2)
    time.sleep(0.25)  # past the slow cadence
    s = by_index(hs.sample())
    assert s[1].xid_errors == 2 and s[0].xid_errors == 0
    assert s[0].ecc_errors == 2


def test_processes_are_matched_to_trainings_or_marked_foreign(mixed, standin_rank):
    tid = uuid.uuid4()
    other = uuid.uuid4()
    simstate.register_process(mixed, 0, standin_rank.pid, 10 * 1024**3)  # no training id in the registry
    fpid = simstate.add_foreign_process(mixed, 1, 3 * 1024**3, user="bob", name="jupyter")
    simstate.register_process(mixed, 2, standin_rank.pid, 1024**3, training_id=str(other))
    owners = TrainingOwners(mixed, mixed, mixed)
    # The training's launcher is this test process, the child's parent: rule 1.
    import os

    owners.set_launchers({os.getpid(): tid})
    owners.refresh_s = 1e9
    s = by_index(HostSampler(mixed, owners).sample())
    (p0,) = s[0].processes
    assert p0.pid == standin_rank.pid and p0.training_id == tid and not p0.foreign and p0.job_type == "training"
    assert p0.used_memory == 10 * 1024**3 and p0.user and "sleep" in p0.command
    assert s[0].job_id == tid
    (p1,) = s[1].processes
    assert p1.pid == fpid and p1.foreign and p1.training_id is None and p1.user == "bob"
    assert s[1].job_id is None
    # On the AMD GPU the ancestry rule still wins over the simulated registry.
    assert s[2].processes[0].training_id == tid
    owners.set_launchers({})
    owners.refresh_s = 1e9
    assert by_index(HostSampler(mixed, owners).sample())[2].processes[0].training_id == other


def test_aggregate_handles_empty_fleets_and_missing_fields():
    from datetime import datetime, timezone

    empty = compute_aggregated([])
    assert empty.gpu_count == 0 and empty.average_utilization is None and empty.max_temperature is None
    t = datetime.now(timezone.utc)
    a = GPUSample("a", 0, t, utilization=50, memory_used=10, memory_total=100, temperature=None, power_draw=None)
    b = GPUSample("a", 1, t, utilization=None, memory_used=20, memory_total=100, temperature=70, power_draw=300)
    c = GPUSample("b", 0, t, lost=True)
    agg = compute_aggregated([a, b, c])
    assert (agg.gpu_count, agg.reporting_count, agg.lost_count) == (3, 2, 1)
    assert agg.average_utilization == 50 and agg.utilization_count == 1
    assert agg.max_temperature == 70 and agg.total_power_draw == 300
    assert agg.total_memory_used == 30 and agg.total_memory_total == 200
    per_host = aggregate_by_host([a, b, c])
    assert per_host["a"].gpu_count == 2 and per_host["b"].average_utilization is None


def test_nvlink_throughput_is_sampled_on_simulated_nvlink_gpus_and_said_once_where_missing(tmp_path, standin_rank,
                                                                                           caplog):
    import logging
    import time

    s = load_settings(data_dir=tmp_path / "d", simulate="2xH100-80GB+2xL4-24GB", simulate_topology="nvlink-all",
                      host_name="sim-n", slow_sample_interval_s=0.2)
    simstate.register_process(s, 0, standin_rank.pid, 10 * 1024**3)
    hs = HostSampler(s)
    caplog.set_level(logging.DEBUG, logger="gpufleet.telemetry.sampler")
    deadline = time.monotonic() + 30
    while True:
        got = by_index(hs.sample())
        if got[0].nvlink_tx:
            break
        assert time.monotonic() < deadline, "no NVLink throughput on the busy H100"
        time.sleep(0.1)
    assert got[0].nvlink_rx and got[1].nvlink_tx is not None
    assert got[2].nvlink_tx is None and got[3].nvlink_tx is None  # L4s have no NVLink
    said = [r for r in caplog.records if r.levelno >= logging.INFO and "nvlink is not available" in r.getMessage()]
    assert len(said) == 1, [r.getMessage() for r in said]
    assert not [r for r in caplog.records if "Function Not Found" in r.getMessage()]
