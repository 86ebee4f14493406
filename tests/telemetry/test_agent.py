"""The agent end to end on a simulated fleet: history fills, training rows carry its id."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter

import pytest
from sqlalchemy import select

from gpufleet.config import load_settings
from gpufleet.db.models import GPUMetricsHistory, Host, Training
from gpufleet.db.session import session_scope, upgrade_database
from gpufleet.devices import simstate
from gpufleet.telemetry.agent import Agent
from gpufleet.telemetry.inventory import register_host
from gpufleet.telemetry.live import LOCAL, read_live_samples


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def agent_settings(request, tmp_path):
    kw = dict(data_dir=tmp_path / "d", simulate="4xH100-80GB", host_name=f"sim-{uuid.uuid4().hex[:6]}",
              sample_interval_s=0.2)
    if request.param == "postgresql":
        kw["database_url"] = request.getfixturevalue("pg_migrated_url")
    s = load_settings(**kw)
    if request.param == "sqlite":
        upgrade_database(s)
    LOCAL.clear()
    return s


def test_history_fills_one_row_per_gpu_per_interval_and_training_rows_carry_its_id(agent_settings):
    s = agent_settings
    rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        tid = uuid.uuid4()
        # What the jobs engineer's worker does: a running training on this host with its launcher
        # pid (here the rank's parent, this test) and the rank's memory on GPUs 1 and 2.
        agent = Agent(s, threading.Event())
        register_host(s)
        with session_scope(s) as sess:
            host = sess.scalar(select(Host).where(Host.name == s.host_name))
            sess.add(Training(id=tid, name="t", owner="alice", recipe="mlp", config={}, status="running",
                              host_id=host.id, launcher_pid=os.getpid(), gpu_ids=[1, 2]))
        for g in (1, 2):
            simstate.register_process(s, g, rank.pid, 8 * 1024**3)
        fpid = simstate.add_foreign_process(s, 3, 2 * 1024**3, user="bob")
        t = threading.Thread(target=agent.run)
        t.start()
        # Seven rounds, however long the machine takes for them.
        deadline = time.monotonic() + 60
        while agent.rounds < 7 and time.monotonic() < deadline:
            time.sleep(0.05)
        agent.stop_event.set()
        t.join(20)
        assert not t.is_alive()
    finally:
        rank.kill()
        rank.wait()
    rounds = agent.rounds
    assert rounds >= 7
    with session_scope(s) as sess:
        rows = sess.scalars(select(GPUMetricsHistory).where(GPUMetricsHistory.host_id == agent.host_id)).all()
    per_ts = Counter(r.timestamp for r in rows)
    # Every round wrote exactly one row per GPU; the writer flushed all of them on stop.
    assert len(per_ts) == rounds and set(per_ts.values()) == {4}
    assert {r.job_id for r in rows if r.gpu_index in (1, 2)} == {tid}
    assert {r.job_type for r in rows if r.gpu_index in (1, 2)} == {"training"}
    assert {r.job_id for r in rows if r.gpu_index in (0, 3)} == {None}
    assert min(r.utilization for r in rows if r.gpu_index == 1) > 50
    assert max(r.utilization for r in rows if r.gpu_index == 0) == 0
    assert agent.writer.stats.dropped_total == 0 and agent.writer.stats.buffered == 0
    live = {x.index: x for x in read_live_samples(s)}
    assert sorted(live) == [0, 1, 2, 3] and live[1].job_id == tid
    assert [p.pid for p in live[3].foreign_processes] == [fpid]


def test_the_round_that_meets_the_stop_is_written_too(agent_settings):
    """The writer sees the stop too and may flush and end while the agent's last round still adds samples."""
    s = agent_settings
    agent = Agent(s, threading.Event())
    sample = agent.round

    def round_that_meets_the_stop():
        if agent.rounds == 3:
            agent.stop_event.set()
            for t in agent._threads:  # the writer has made its last flush and ended
                t.join(30)
        return sample()

    agent.round = round_that_meets_the_stop
    agent.run()
    assert agent.rounds == 4
    with session_scope(s) as sess:
        stamps = sess.scalars(select(GPUMetricsHistory.timestamp).where(
            GPUMetricsHistory.host_id == agent.host_id)).all()
    assert len(set(stamps)) == agent.rounds  # every round, the last one too
