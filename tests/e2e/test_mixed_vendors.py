"""A 3-GPU mixed-vendor simulated fleet (NVIDIA H100 + AMD MI300X + Intel Max 1550), seen everywhere:
`gpufleet gpus`, the API, Prometheus /metrics and the dashboard in a browser, against a real `gpufleet serve`.
What a vendor does not report is null in the API, absent from /metrics and a dash on the dashboard."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.servers import ServedProcess, gpufleet, serve_env, serve_process

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

MIXED = {"GPUFLEET_SIMULATE": "1xH100-80GB+1xMI300X-192GB+1xMAX1550-128GB"}
SEED_TABLE = [  # the seed's table: ID, vendor, model, VRAM, backend
    ("0", "NVIDIA", "NVIDIA H100 80GB HBM3", "80.0 GiB", "cuda:0"),
    ("1", "AMD", "AMD Instinct MI300X", "192 GiB", "hip:0"),
    ("2", "Intel", "Intel(R) Data Center GPU Max 1550", "128 GiB", "xpu:0"),
]


@pytest.fixture(scope="module")
def mixed_server(dashboard_built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedProcess]:
    with serve_process(tmp_path_factory.mktemp("mixed-data"), **MIXED) as srv:
        yield srv


def _live_gpus(url: str) -> list[dict]:
    """The GPUs once the agent has sampled every one of them."""
    deadline = time.monotonic() + 60
    while True:
        data = httpx.get(f"{url}/api/v1/system/gpus", timeout=10).json()["data"]
        if len(data) == 3 and all(g["live"] for g in data) or time.monotonic() > deadline:
            return data
        time.sleep(0.3)


def test_the_cli_prints_the_seeds_table(tmp_path: Path) -> None:
    out = subprocess.run([*gpufleet(), "gpus", "--wide"], env={**serve_env(tmp_path, **MIXED), "COLUMNS": "200"},
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    head = next(line for line in out.stdout.splitlines() if line.split()[:2] == ["ID", "Vendor"])
    assert head.split()[:6] == ["ID", "Vendor", "Model", "VRAM", "Free", "Backend"]
    rows = [line for line in out.stdout.splitlines() if line.strip()[:1].isdigit()]
    assert len(rows) == 3
    for line, (gid, vendor, model, vram, backend) in zip(rows, SEED_TABLE):
        assert line.split()[:2] == [gid, vendor] and model in line and vram in line and backend in line, line
    as_json = json.loads(subprocess.run([*gpufleet(), "gpus", "--json"], env=serve_env(tmp_path, **MIXED),
                                        capture_output=True, text=True, timeout=120, check=True).stdout)
    gpus = as_json["gpus"] if isinstance(as_json, dict) else as_json
    assert [(g["vendor"], g["backend"]) for g in gpus] == [("nvidia", "cuda"), ("amd", "hip"), ("intel", "xpu")]


def test_the_api_lists_each_vendor_with_its_fields(mixed_server: ServedProcess) -> None:
    gpus = _live_gpus(mixed_server.url)
    assert [(g["index"], g["vendor"], g["backend"], g["name"]) for g in gpus] == [
        (0, "nvidia", "cuda", "NVIDIA H100 80GB HBM3"), (1, "amd", "hip", "AMD Instinct MI300X"),
        (2, "intel", "xpu", "Intel(R) Data Center GPU Max 1550")]
    assert [g["memory_total"] for g in gpus] == [80 * 2**30, 192 * 2**30, 128 * 2**30]
    assert [g["compute_capability"] for g in gpus] == ["9.0", None, None]  # an NVIDIA notion only
    nvidia, amd, intel = (g["live"] for g in gpus)
    assert all(v is not None for k, v in nvidia.items() if k in ("temperature", "power_limit", "sm_clock", "mem_clock"))
    # What amdsmi / xpu-smi do not give for these GPUs is null, not 0.
    assert amd["sm_clock"] is None and amd["mem_clock"] is None and amd["power_limit"] == 750.0
    assert intel["power_limit"] is None and intel["mem_clock"] is None and intel["sm_clock"] is not None
    assert all(g["live"]["utilization"] is not None and g["live"]["memory_total"] for g in gpus)


def test_prometheus_has_every_vendor_and_no_series_for_what_it_lacks(mixed_server: ServedProcess) -> None:
    _live_gpus(mixed_server.url)
    fams = {f.name: f for f in text_string_to_metric_families(httpx.get(f"{mixed_server.url}/metrics").text)}
    info = {s.labels["gpu"]: (s.labels["vendor"], s.labels["backend"], s.labels["model_name"])
            for s in fams["gpufleet_gpu_info"].samples}
    assert info == {"0": ("nvidia", "cuda", "NVIDIA H100 80GB HBM3"), "1": ("amd", "hip", "AMD Instinct MI300X"),
                    "2": ("intel", "xpu", "Intel(R) Data Center GPU Max 1550")}

    def gpus_of(name: str) -> set[str]:
        return {s.labels["gpu"] for s in fams[name].samples}

    assert gpus_of("DCGM_FI_DEV_GPU_UTIL") == gpus_of("DCGM_FI_DEV_FB_TOTAL") == {"0", "1", "2"}
    assert gpus_of("DCGM_FI_DEV_POWER_MGMT_LIMIT") == {"0", "1"}  # Intel's xpu-smi gives no power limit
    assert gpus_of("DCGM_FI_DEV_SM_CLOCK") == {"0", "2"}  # amdsmi gives this MI300X no SM clock
    fb = {s.labels["gpu"]: s.value for s in fams["DCGM_FI_DEV_FB_TOTAL"].samples}
    assert fb == {"0": 80 * 1024, "1": 192 * 1024, "2": 128 * 1024}  # MiB


def test_the_dashboard_names_each_vendor_and_dashes_what_it_lacks(browser, mixed_server: ServedProcess,
                                                                    screenshots: Path) -> None:
    _live_gpus(mixed_server.url)
    ctx = browser.new_context(base_url=mixed_server.url, viewport={"width": 1280, "height": 800})
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.set_default_timeout(15_000)
    try:
        page.goto("/")
        page.get_by_test_id("gpu-card-sim-host-2").wait_for()
        vendors = [e.inner_text() for e in page.get_by_test_id("gpu-vendor").all()]
        assert vendors == ["NVIDIA · cuda", "AMD · hip", "Intel · xpu"]
        for index, (_, _, model, _, _) in enumerate(SEED_TABLE):
            assert model in page.get_by_test_id(f"gpu-card-sim-host-{index}").inner_text()
        # What a vendor does not report is left out, not drawn as 0: no power limit from xpu-smi,
        # no SM clock from amdsmi for this MI300X.
        nvidia_power = page.get_by_test_id("gpu-card-sim-host-0").get_by_title("power draw / limit").inner_text()
        intel_power = page.get_by_test_id("gpu-card-sim-host-2").get_by_title("power draw / limit").inner_text()
        assert "/700 W" in nvidia_power and "60" in intel_power and "/" not in intel_power, (nvidia_power, intel_power)
        assert "SM" in page.get_by_test_id("gpu-card-sim-host-0").inner_text()
        assert "SM" not in page.get_by_test_id("gpu-card-sim-host-1").inner_text()
        page.screenshot(path=str(screenshots / "fleet-mixed-vendors.png"))
    finally:
        ctx.close()
    assert not errors, f"the dashboard threw in the browser: {errors}"


def test_validate_and_recommend_say_the_mix_its_cost_and_the_mode(mixed_server: ServedProcess) -> None:
    _live_gpus(mixed_server.url)
    v = httpx.post(f"{mixed_server.url}/api/v1/system/gpus/validate", json={"gpu_ids": [0, 1, 2], "memory_mb": 1024})
    assert v.status_code == 200, v.text
    body = v.json()
    assert body["ok"] is True and body["problems"] == []
    (mixed,) = [w for w in body["warnings"] if w["code"] == "mixed-vendors"]
    assert "GPUs of amd and intel and nvidia in one training" in mixed["message"]
    assert "gloo" in mixed["message"] and "gpufleet would use parallel_mode independent" in mixed["message"]
    r = httpx.get(f"{mixed_server.url}/api/v1/system/gpus/recommend", params={"memory_mb": 1024, "count": 3})
    assert r.status_code == 200, r.text
    assert not r.json()["candidates"]
    assert "only across vendors" in r.json()["wait_reason"] and "name the GPUs (gpu_ids)" in r.json()["wait_reason"]
