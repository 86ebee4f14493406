"""Fleet deployment: agents in other processes reach API processes through Redis."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import pytest
from websockets.sync.client import connect

from gpufleet.config import load_settings
from gpufleet.db.session import upgrade_database
from gpufleet.telemetry.live import read_agent_health, read_live_samples

from .test_ws import Reader
from support.servers import serve_inprocess

from .wsutil import build_app

# What an agent on another GPU host does each round, as a separate process.
AGENT_ROUND = r"""
import sys
from datetime import datetime, timezone
from gpufleet.config import load_settings
from gpufleet.events import TELEMETRY_SAMPLES, get_bus
from gpufleet.telemetry.live import write_live_redis
from gpufleet.telemetry.sample import GPUSample, GPUProcess
s = load_settings(redis_url=sys.argv[1], host_name=sys.argv[2], data_dir=sys.argv[3])
now = datetime.now(timezone.utc)
samples = [GPUSample(host=s.host_name, index=i, timestamp=now, utilization=float(sys.argv[4]),
                     memory_used=10, memory_total=100, temperature=50.0 + i, power_draw=200.0,
                     processes=[GPUProcess(pid=42, user="bob", command="python")]) for i in range(2)]
write_live_redis(s, s, s.host_name, samples, {"samples_total": 7, "buffered": 0})
get_bus(s).publish(TELEMETRY_SAMPLES, {"host": s.host_name, "samples": [x.to_dict() for x in samples]})
"""


def _agent_round(redis_url, host, tmp_path, value):
    subprocess.run([sys.executable, "-c", AGENT_ROUND, redis_url, host, str(tmp_path / host), str(value)],
                   check=True, timeout=60)


@pytest.mark.redis
def test_live_samples_and_stream_cross_processes_through_redis(redis_url, tmp_path):
    s = load_settings(data_dir=tmp_path / "api", redis_url=redis_url)
    upgrade_database(s)
    host = f"gpu-{uuid.uuid4().hex[:6]}"
    _agent_round(redis_url, host, tmp_path, 10.0)
    live = [x for x in read_live_samples(s) if x.host == host]
    assert [(x.index, x.utilization, x.processes[0].user) for x in live] == [(0, 10.0, "bob"), (1, 10.0, "bob")]
    assert read_agent_health(s)[host]["samples_total"] == 7
    with serve_inprocess(build_app(s)) as srv, connect(f"ws://{srv.addr}/api/v1/ws") as ws:
        r = Reader(ws)
        r.send(op="subscribe", channels=[f"gpu:{host}:1", f"host:{host}"])
        snap = r.until(lambda m: m["type"] == "snapshot" and m["channel"] == f"gpu:{host}:1")
        assert snap["data"]["utilization"] == 10.0  # seeded from the Redis live view
        _agent_round(redis_url, host, tmp_path, 55.0)
        up = r.until(lambda m: m["type"] == "update" and m["channel"] == f"gpu:{host}:1", timeout=10)
        assert up["data"]["utilization"] == 55.0 and up["data"]["temperature"] == 51.0
        hv = r.until(lambda m: m["type"] == "update" and m["channel"] == f"host:{host}")
        assert hv["data"]["aggregate"]["gpu_count"] == 2 and hv["data"]["aggregate"]["max_temperature"] == 51.0


@pytest.mark.redis
def test_a_host_whose_agent_stops_leaves_the_live_view(redis_url, tmp_path):
    s = load_settings(data_dir=tmp_path / "api", redis_url=redis_url)
    host = f"gpu-{uuid.uuid4().hex[:6]}"
    _agent_round(redis_url, host, tmp_path, 1.0)
    from gpufleet.telemetry.live import LIVE_KEY_PREFIX, live_ttl_s, redis_client

    ttl = redis_client(redis_url).ttl(LIVE_KEY_PREFIX + host)
    assert 0 < ttl <= live_ttl_s(s)
    redis_client(redis_url).expire(LIVE_KEY_PREFIX + host, 1)  # fast-forward the TTL
    deadline = time.monotonic() + 30
    while [x for x in read_live_samples(s) if x.host == host] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [x for x in read_live_samples(s) if x.host == host]
