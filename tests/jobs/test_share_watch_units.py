"""The share watchdog's judgement, on the simulated NVML's per-process memory, with a clock of the test's own."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from gpufleet.devices import simstate
from gpufleet.devices.backend import device_backend
from gpufleet.jobs import share_watch, stops
from gpufleet.lifecycle import outcome

GIB = 1024**3


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def group():
    """A process leading its own group, as a launcher does."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    yield p.pid
    p.kill()
    p.wait()


def _watch(sim_settings, pid: int, budget: int, clock: Clock) -> share_watch.ShareWatch:
    return share_watch.ShareWatch(device_backend(sim_settings).nvml, [0], pid, budget, over_s=1.0, sample_s=0.25,
                                  clock=clock)


def test_a_group_over_its_share_longer_than_the_moment_is_named_once(sim_settings, group):
    clock = Clock()
    simstate.register_process(sim_settings, 0, group, 6 * GIB, training_id="greedy")
    watch = _watch(sim_settings, group, 4 * GIB, clock)
    assert watch.check() is None  # over, but only just now
    clock.now = 0.6
    assert watch.check() is None
    clock.now = 1.2
    over = watch.check()
    assert over is not None and (over.gpu, over.held, over.budget) == (0, 6 * GIB, 4 * GIB) and over.over_s >= 1.0
    assert over.gpu_total == 80 * GIB and not over.exclusive_next
    assert over.new_estimate == max(int(6 * GIB * 1.1) + 1, 8 * GIB)
    clock.now = 5.0
    assert watch.check() is None  # said once


def test_a_dip_under_the_share_starts_the_moment_again_and_a_neighbour_within_it_is_never_named(sim_settings, group):
    clock = Clock()
    simstate.register_process(sim_settings, 0, group, 6 * GIB)
    watch = _watch(sim_settings, group, 4 * GIB, clock)
    watch.check()
    clock.now = 0.8
    simstate.register_process(sim_settings, 0, group, 3 * GIB)
    assert watch.check() is None and watch.since is None
    simstate.register_process(sim_settings, 0, group, 6 * GIB)
    clock.now = 1.2
    assert watch.check() is None  # over again from 1.2 on, not from 0
    clock.now = 2.0
    assert watch.check() is None
    clock.now = 2.3
    assert watch.check() is not None
    neighbour = _watch(sim_settings, group, 8 * GIB, Clock())
    for t in range(10):
        neighbour.clock.now = float(t)
        assert neighbour.check() is None


def test_a_peak_that_leaves_no_room_beside_it_comes_back_holding_the_gpu_whole(sim_settings, group):
    clock = Clock()
    simstate.register_process(sim_settings, 0, group, 50 * GIB)
    watch = _watch(sim_settings, group, 30 * GIB, clock)
    watch.check()
    clock.now = 1.5
    over = watch.check()
    assert over is not None and over.exclusive_next
    d = stops.decide(stops.Stop("share", 0.0, "", overrun=over), outcome.Decision("queued", "interrupted"),
                     stopping=False, step=4, host_name="h", max_runtime_s=None, checkpointed=True)
    assert d.status == "queued" and d.retry_kind == "share_overrun" and not d.counts_restart
    assert d.row == {"memory_estimate": over.new_estimate, "exclusive": True}
    assert "holding its GPU whole" in d.reason and "it will resume from step 4" in d.reason


def test_only_a_share_someone_asked_for_or_measured_is_held_to_it():
    row = dict(exclusive=False, memory_estimate=4 * GIB, memory_declared=None)
    assert share_watch.held_to(SimpleNamespace(**row, estimate={"total": 3 * GIB})) == 4 * GIB  # memory_mb
    assert share_watch.held_to(SimpleNamespace(**row, estimate={"source": "declared", "total": 4 * GIB})) == 4 * GIB
    assert share_watch.held_to(SimpleNamespace(**row, estimate={"total": 4 * GIB})) is None  # a first estimate
    assert share_watch.held_to(SimpleNamespace(**dict(row, exclusive=True), estimate=None)) is None  # whole GPUs
