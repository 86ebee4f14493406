"""/metrics carries every dcgm-exporter default counter NVML can give, under its names, from the simulated NVML."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.config import load_settings
from gpufleet.db.session import upgrade_database
from gpufleet.devices import simstate
from gpufleet.devices.backend import device_backend
from gpufleet.devices.simhealth import set_pcie_replays, set_row_remaps
from gpufleet.devices.simnvml import DRIVER_VERSION
from gpufleet.telemetry.live import LOCAL
from gpufleet.telemetry.sampler import NvmlSampler

from .wsutil import build_app

# dcgm-exporter 4.x's etc/default-counters.csv: (field, type). DCGM_FI_DEV_VGPU_LICENSE_STATUS is left out:
# NVML answers it only inside a vGPU guest. DCGM_FI_DRIVER_VERSION is a label there, on every series.
DEFAULT_COUNTERS = {
    "DCGM_FI_DEV_FB_RESERVED": "gauge",
    "DCGM_FI_DEV_SM_CLOCK": "gauge", "DCGM_FI_DEV_MEM_CLOCK": "gauge", "DCGM_FI_DEV_MEMORY_TEMP": "gauge",
    "DCGM_FI_DEV_GPU_TEMP": "gauge", "DCGM_FI_DEV_POWER_USAGE": "gauge",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "counter", "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": "counter",
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": "counter", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "counter",
    "DCGM_FI_DEV_GPU_UTIL": "gauge", "DCGM_FI_DEV_MEM_COPY_UTIL": "gauge", "DCGM_FI_DEV_ENC_UTIL": "gauge",
    "DCGM_FI_DEV_DEC_UTIL": "gauge", "DCGM_FI_DEV_XID_ERRORS": "gauge", "DCGM_FI_DEV_FB_FREE": "gauge",
    "DCGM_FI_DEV_FB_USED": "gauge", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": "counter",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "counter", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "counter",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "gauge",
}


@pytest.fixture
def metrics_text(tmp_path):
    s = load_settings(data_dir=tmp_path / "d", simulate="2xH100-80GB", host_name="h1")
    upgrade_database(s)
    sampler = NvmlSampler(s, s, device_backend(s))
    try:
        simstate.inject_xid(s, 1, 79)
        set_row_remaps(s, 1, correctable=2, uncorrectable=1, pending=True)
        set_pcie_replays(s, 0, 3)
        sampler.sample()  # the first round reads the slow fields too
        LOCAL.clear()
        LOCAL.put_host("h1", sampler.sample())
    finally:
        sampler.close()
    with TestClient(build_app(s)) as c:
        text = c.get("/metrics").text
    LOCAL.clear()
    return text


def test_every_default_counter_nvml_gives_is_exported_with_dcgm_names_types_and_labels(metrics_text):
    fams = {f.name: f for f in text_string_to_metric_families(metrics_text)}
    for name, kind in DEFAULT_COUNTERS.items():
        assert f"# TYPE {name} {kind}\n" in metrics_text and f"\n{name}{{" in metrics_text, name
        # (the parser reads a counter's samples as NAME_total; the text has dcgm-exporter's NAME)
        got = {smp.labels["gpu"]: smp for smp in fams[name].samples if smp.name in (name, f"{name}_total")}
        assert sorted(got) == ["0", "1"], (name, fams[name].samples)
        assert set(got["0"].labels) == {"gpu", "UUID", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"}
        assert {smp.labels["DCGM_FI_DRIVER_VERSION"] for smp in got.values()} == {DRIVER_VERSION}, name
    value = {name: {smp.labels["gpu"]: smp.value for smp in fams[name].samples} for name in DEFAULT_COUNTERS}
    assert value["DCGM_FI_DEV_XID_ERRORS"] == {"0": 0.0, "1": 79.0}
    assert value["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"] == {"0": 3.0, "1": 0.0}
    assert value["DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"]["1"] == 2.0
    assert value["DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"]["1"] == 1.0
    assert value["DCGM_FI_DEV_ROW_REMAP_FAILURE"] == {"0": 0.0, "1": 0.0}
    assert all(v > 3.6e9 for v in value["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].values())  # mJ since boot
    for gpu in ("0", "1"):
        assert value["DCGM_FI_DEV_MEMORY_TEMP"][gpu] > value["DCGM_FI_DEV_GPU_TEMP"][gpu]
    assert value["DCGM_FI_DEV_ENC_UTIL"] == {"0": 0.0, "1": 0.0}
    # NVML's v2 memory info: the driver's share, apart from what processes use; used still counts it, as NVML's
    # first call does, so used + free is the total.
    assert value["DCGM_FI_DEV_FB_RESERVED"] == {"0": 4.0, "1": 4.0}
    total = {smp.labels["gpu"]: smp.value for smp in fams["DCGM_FI_DEV_FB_TOTAL"].samples}
    for gpu in ("0", "1"):
        assert value["DCGM_FI_DEV_FB_USED"][gpu] + value["DCGM_FI_DEV_FB_FREE"][gpu] == total[gpu] > 0


def test_promtool_finds_only_the_deliberate_dcgm_differences(metrics_text):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    out = subprocess.run([promtool, "check", "metrics"], input=metrics_text, capture_output=True, text=True,
                         timeout=60)
    problems = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]
    # dcgm-exporter's camelCase labels, its counters' names without _total, and its own name with "COUNTER"
    # in it: kept so its dashboards work. Nothing else.
    deliberate = ("snake_case", '"_total" suffix', "DCGM_FI_DEV_PCIE_REPLAY_COUNTER metric name should not include")
    assert problems and all(p.startswith("DCGM_FI_") and any(d in p for d in deliberate) for p in problems), \
        [p for p in problems if not any(d in p for d in deliberate)]
