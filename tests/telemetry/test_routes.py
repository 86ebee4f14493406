"""HTTP: the history endpoint, the live view and Prometheus /metrics (checked with a real parser)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.config import load_settings
from gpufleet.db.models import Training
from gpufleet.db.session import session_scope, upgrade_database
from gpufleet.telemetry.live import LOCAL
from gpufleet.telemetry.sample import GPUProcess, GPUSample
from gpufleet.telemetry.storage import MetricsWriter

from .helpers import make_host, make_samples
from .wsutil import build_app


@pytest.fixture
def client(tmp_path):
    s = load_settings(data_dir=tmp_path / "d")
    upgrade_database(s)
    LOCAL.clear()
    with TestClient(build_app(s)) as c:
        c.settings = s
        yield c
    LOCAL.clear()


def test_history_endpoint_downsamples_per_gpu(client):
    s = client.settings
    host_id, host = make_host(s)
    # Recent, so the raw samples (not the rollups) answer.
    start = (datetime.now(timezone.utc) - timedelta(hours=2)).replace(second=0, microsecond=0)
    w = MetricsWriter(s, host_id)
    w.add(make_samples(host, start, gpus=2, seconds=600))
    w.flush()
    params = {"gpu": f"{host}:1", "from": start.isoformat(), "to": (start + timedelta(minutes=10)).isoformat(),
              "points": 20}
    r = client.get("/api/v1/system/metrics/history", params=params)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["step_s"] == 30 and [(x["host"], x["gpu_index"]) for x in body["series"]] == [(host, 1)]
    pts = body["series"][0]["points"]
    assert len(pts) == 20 and all(p["samples"] == 30 for p in pts)
    assert pts[0]["utilization_min"] == 10 and pts[0]["utilization_max"] == 39
    agg = client.get("/api/v1/system/metrics/history", params={**params, "gpu": "0,1", "aggregate": "true",
                                                              "points": 1}).json()
    assert len(agg["series"]) == 1 and agg["series"][0]["points"][0]["samples"] == 1200


@pytest.mark.parametrize("params, message", [
    ({"from": "yesterday"}, "is not a time"),
    ({"from": "2026-06-01T00:00:00"}, "has no time zone"),
    ({"from": "2026-06-02T00:00:00Z", "to": "2026-06-01T00:00:00Z"}, "must be after"),
    ({"points": 0}, "greater than or equal to 1"),
    ({"gpu": f"h1:{2**63}"}, "out of range"),
    ({"gpu": "first"}, "host:index"),
])
def test_history_rejects_bad_input_with_a_clear_4xx(client, params, message):
    r = client.get("/api/v1/system/metrics/history", params=params)
    assert r.status_code == 422 and message in str(r.json()["detail"]), r.text


def test_history_of_an_unknown_host_is_the_fleet_wide_404(client):
    r = client.get("/api/v1/system/metrics/history", params={"host": "nowhere"})
    assert r.status_code == 404 and "host 'nowhere' is not known; known hosts:" in r.json()["detail"], r.text


def _fleet(training_id):
    t = datetime.now(timezone.utc)
    busy = GPUSample("h1", 0, t, uuid="GPU-aaa", name="NVIDIA H100 80GB HBM3", vendor="nvidia",
                     utilization=91.0, memory_util=40.0, memory_used=40 * 2**30, memory_total=80 * 2**30,
                     memory_free=40 * 2**30, temperature=71.0, power_draw=612.5, power_limit=700.0,
                     sm_clock=1980, mem_clock=2619, pcie_tx=1 << 20, pcie_rx=1 << 19, ecc_errors=0, xid_errors=1,
                     processes=[GPUProcess(7, "alice", "python train", 2**30, training_id, "training", False),
                                GPUProcess(8, "bob", "jupyter", 2**29)])
    refused = GPUSample("h1", 1, t, uuid="GPU-bbb", name="NVIDIA H100 80GB HBM3", vendor="nvidia",
                        utilization=0.0, memory_used=0, memory_total=80 * 2**30, memory_free=80 * 2**30)
    lost = GPUSample("h1", 2, t, uuid="GPU-ccc", vendor="nvidia", lost=True)
    return [busy, refused, lost]


def test_prometheus_exposition_parses_and_uses_dcgm_names(client):
    s = client.settings
    tid = uuid.uuid4()
    with session_scope(s) as sess:
        sess.add(Training(id=tid, name="t", owner="alice", recipe="mlp", config={}, status="running"))
        sess.add(Training(name="q", owner="bob", recipe="mlp", config={}, status="queued"))
    LOCAL.put_host("h1", _fleet(tid))
    LOCAL.put_health("h1", {"samples_total": 12, "buffered": 3, "dropped_total": 0, "written_total": 30})
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    fams = {f.name: f for f in text_string_to_metric_families(r.text)}
    util = fams["DCGM_FI_DEV_GPU_UTIL"]
    assert util.type == "gauge"
    by_gpu = {smp.labels["gpu"]: smp for smp in util.samples}
    assert set(by_gpu) == {"0", "1"}  # the lost GPU reports no utilization
    assert by_gpu["0"].value == 91.0 and by_gpu["0"].labels == {
        "gpu": "0", "UUID": "GPU-aaa", "device": "nvidia0", "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "h1",
        "DCGM_FI_DRIVER_VERSION": ""}  # these samples name no driver
    fb = {smp.labels["gpu"]: smp.value for smp in fams["DCGM_FI_DEV_FB_USED"].samples}
    assert fb["0"] == 40 * 1024  # MiB, as dcgm-exporter
    assert [smp.value for smp in fams["DCGM_FI_DEV_GPU_TEMP"].samples] == [71.0]  # GPU 1 refused it
    assert {smp.value for smp in fams["DCGM_FI_DEV_POWER_USAGE"].samples} == {612.5}
    assert {smp.labels["gpu"]: smp.value for smp in fams["gpufleet_gpu_lost"].samples} == {"0": 0, "1": 0, "2": 1}
    procs = {(smp.labels["gpu"], smp.labels["kind"]): smp.value for smp in fams["gpufleet_gpu_processes"].samples}
    assert procs[("0", "foreign")] == 1 and procs[("0", "training")] == 1
    assert [smp.labels["training_id"] for smp in fams["gpufleet_gpu_training_info"].samples] == [str(tid)]
    st = {smp.labels["status"]: smp.value for smp in fams["gpufleet_trainings"].samples}
    assert st["running"] == 1 and st["queued"] == 1
    assert fams["gpufleet_queue_length"].samples[0].value == 1
    assert fams["gpufleet_metrics_buffered_rows"].samples[0].value == 3
    assert fams["gpufleet_sampler_samples"].type == "counter"


def test_live_view_names_who_holds_each_gpu(client):
    s = client.settings
    tid = uuid.uuid4()
    with session_scope(s) as sess:
        sess.add(Training(id=tid, name="sae-big", owner="alice", recipe="sae", config={}, status="running"))
    LOCAL.put_host("h1", _fleet(tid))
    body = client.get("/api/v1/system/metrics/live").json()
    assert [g["index"] for g in body["gpus"]] == [0, 1, 2]
    assert body["gpus"][0]["job_id"] == str(tid)
    assert body["trainings"][str(tid)]["owner"] == "alice"
    assert body["aggregate"]["gpu_count"] == 3 and body["aggregate"]["lost_count"] == 1
    assert body["hosts"]["h1"]["max_temperature"] == 71.0


def test_the_grafana_dashboard_only_queries_series_that_metrics_exposes(client):
    import json
    import re
    from pathlib import Path

    LOCAL.put_host("h1", _fleet(uuid.uuid4()))
    LOCAL.put_health("h1", {"samples_total": 1, "last_sample_unix": 1.0, "buffered": 0, "dropped_total": 0})
    from datetime import date

    from gpufleet.db.models import UsageDaily

    with session_scope(client.settings) as sess:  # a day of usage, as the maintenance pass stores it
        sess.add(UsageDaily(day=date(2026, 1, 2), training_id=uuid.uuid4(), owner="alice",
                            gpu_seconds_held=3600.0, gpu_seconds_used=1800.0))
    exposed = {smp.name for fam in text_string_to_metric_families(client.get("/metrics").text) for smp in fam.samples}
    dash = json.loads((Path(__file__).resolve().parents[2] / "deploy/grafana/gpufleet-gpus.json").read_text())
    queried = {name for p in dash["panels"] for t in p["targets"]
               for name in re.findall(r"\b(?:DCGM_\w+|gpufleet_\w+)", t["expr"])}
    assert queried and queried <= exposed, queried - exposed
    # gpufleet's own series are selected by their snake_case labels.
    for p in dash["panels"]:
        for t in p["targets"]:
            if "gpufleet_" in t["expr"] and "DCGM_" not in t["expr"]:
                assert "Hostname=" not in t["expr"] and "{{Hostname}}" not in t.get("legendFormat", ""), t


def test_gpufleet_series_pass_promtool_and_use_snake_case_labels(client):
    import os
    import shutil
    import subprocess

    tid = uuid.uuid4()
    with session_scope(client.settings) as sess:
        sess.add(Training(id=tid, name="t", owner="alice", recipe="mlp", config={}, status="running"))
    LOCAL.put_host("h1", _fleet(tid))
    LOCAL.put_health("h1", {"samples_total": 12, "last_sample_unix": 1.0, "buffered": 3, "dropped_total": 0,
                            "written_total": 30, "last_duration_s": 0.01, "disabled_fields": 1})
    text = client.get("/metrics").text
    own = [f for f in text_string_to_metric_families(text) if f.name.startswith("gpufleet_")]
    assert own
    for fam in own:
        for smp in fam.samples:
            assert all(k == k.lower() for k in smp.labels), (fam.name, smp.labels)
    lost = {smp.labels["gpu"]: smp.labels for smp in next(f for f in own if f.name == "gpufleet_gpu_lost").samples}
    assert lost["0"] == {"gpu": "0", "uuid": "GPU-aaa", "device": "nvidia0",
                         "model_name": "NVIDIA H100 80GB HBM3", "hostname": "h1"}
    # promtool (Debian's prometheus package; .ci/run installs it) lints gpufleet's own families.
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail("promtool is missing: .ci/run installs Debian's prometheus package for it")
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    blocks, keep = [], False
    for line in text.splitlines():
        if line.startswith("# HELP "):
            keep = line.split()[2].startswith("gpufleet_")
        if keep:
            blocks.append(line)
    out = subprocess.run([promtool, "check", "metrics"], input="\n".join(blocks) + "\n",
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and not out.stdout.strip() and not out.stderr.strip(), out.stdout + out.stderr
    # The same check does see dcgm-exporter's camelCase labels, kept on purpose for compatibility.
    dcgm = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert "snake_case" in dcgm.stdout + dcgm.stderr


def test_history_answer_matches_its_published_schema(client):
    from gpufleet.wire.metrics import HistoryPublic

    s = client.settings
    host_id, host = make_host(s)
    start = (datetime.now(timezone.utc) - timedelta(hours=1)).replace(second=0, microsecond=0)
    w = MetricsWriter(s, host_id)
    w.add(make_samples(host, start, gpus=2, seconds=120))
    w.flush()
    r = client.get("/api/v1/system/metrics/history", params={"host": host, "from": start.isoformat(),
                                                             "to": (start + timedelta(minutes=2)).isoformat()})
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    parsed = HistoryPublic.model_validate(r.json())
    assert len(parsed.series) == 2 and parsed.series[0].points[0].samples >= 1
    schema = client.get("/openapi.json").json()
    op = schema["paths"]["/api/v1/system/metrics/history"]["get"]
    assert op["operationId"] == "metrics-history"
    assert op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/HistoryPublic")
