"""The embedded default end to end: the product's app with its background agent, no Redis."""

from __future__ import annotations

import time

from sqlalchemy import func, select
from websockets.sync.client import connect

from gpufleet.api.app import create_app
from gpufleet.config import load_settings
from gpufleet.db.models import GPUMetricsHistory
from gpufleet.db.session import session_scope, upgrade_database
from gpufleet.telemetry.live import LOCAL
from support.servers import serve_inprocess

from .test_ws import Reader


def test_serve_samples_streams_and_stores_simulated_gpus(tmp_path):
    s = load_settings(data_dir=tmp_path / "d", simulate="4xH100-80GB", host_name="emb-host",
                      sample_interval_s=0.25)
    upgrade_database(s)
    LOCAL.clear()
    app = create_app(s, background=True)
    with serve_inprocess(app, lifespan="on") as srv, connect(f"ws://{srv.addr}/api/v1/ws") as ws:
        r = Reader(ws)
        deadline = time.monotonic() + 20
        while not LOCAL.all() and time.monotonic() < deadline:
            time.sleep(0.1)
        r.send(op="subscribe", channels=["gpu:emb-host:2", "aggregate"])
        snap = r.until(lambda m: m["type"] == "snapshot" and m["channel"] == "gpu:emb-host:2", timeout=10)
        assert snap["data"]["memory_total"] == 80 * 1024**3
        ups = []
        while len(ups) < 3:
            m = r.until(lambda m: m["type"] == "update" and m["channel"] == "gpu:emb-host:2" and m not in ups,
                        timeout=10)
            ups.append(m)
        stamps = [u["data"]["timestamp"] for u in ups]
        assert stamps == sorted(stamps) and len(set(stamps)) == 3
        agg = r.until(lambda m: m["type"] == "update" and m["channel"] == "aggregate")
        assert agg["data"]["fleet"]["gpu_count"] == 4
        # The writer flushes every interval; wait for four rounds stored, however long they take.
        def stored() -> dict[int, int]:
            with session_scope(s) as sess:
                return dict(sess.execute(select(GPUMetricsHistory.gpu_index, func.count())
                                         .group_by(GPUMetricsHistory.gpu_index)).all())

        deadline = time.monotonic() + 60
        while min(stored().values(), default=0) < 4 and time.monotonic() < deadline:
            time.sleep(0.1)
    per_gpu = stored()
    assert sorted(per_gpu) == [0, 1, 2, 3] and len(set(per_gpu.values())) == 1 and per_gpu[0] >= 4
    LOCAL.clear()
