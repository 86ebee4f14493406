"""AMD and Intel GPUs through their own interfaces (simulated amdsmi and xpu-smi), seen by CLI, API and /metrics."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import re
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.config import load_settings
from gpufleet.devices import detect_gpus, simstate
from gpufleet.devices.detect import detect_amd_with
from gpufleet.devices.simamdsmi import AMDSMI_STATUS_NOT_SUPPORTED, AmdSmiLibraryException, SimAmdSmi
from gpufleet.devices.backend import device_backend
from gpufleet.devices.xpusmi import detect_with, stats_with
from gpufleet.telemetry.vendors import HostSampler

GIB = 1024**3
SEED = "1xH100-80GB+1xMI300X-192GB+1xMAX1550-128GB"


@pytest.fixture
def mixed(tmp_path):
    return load_settings(data_dir=tmp_path / "d", simulate=SEED, host_name="mix-1")


def test_the_seed_fleet_is_detected_through_each_vendors_interface(mixed):
    amd_calls: list[str] = []
    lib = device_backend(mixed).amdsmi
    real = lib.amdsmi_get_gpu_asic_info
    lib.amdsmi_get_gpu_asic_info = lambda h: amd_calls.append("asic") or real(h)
    try:
        gpus = detect_gpus(mixed)
    finally:
        del lib.amdsmi_get_gpu_asic_info
    assert [(g.index, g.label, g.vendor, g.name, g.memory_total // GIB) for g in gpus] == [
        (0, "cuda:0", "nvidia", "NVIDIA H100 80GB HBM3", 80),
        (1, "hip:0", "amd", "AMD Instinct MI300X", 192),
        (2, "xpu:0", "intel", "Intel(R) Data Center GPU Max 1550", 128),
    ]
    assert amd_calls == ["asic"]  # the AMD GPU came from amdsmi
    assert all(g.healthy and g.simulated and g.uuid and g.pci_bus_id for g in gpus)
    assert all(0 < g.memory_free <= g.memory_total for g in gpus)
    assert [g.compute_capability for g in gpus] == ["9.0", None, None]
    # amdsmi's own init count is balanced after detection.
    assert lib._inits == 0


def test_refused_fields_are_null_and_a_lost_gpu_is_isolated(mixed):
    simstate.refuse_field(mixed, 1, "uuid")
    simstate.refuse_field(mixed, 2, "memory")
    gpus = detect_gpus(mixed)
    assert gpus[1].uuid is None and gpus[1].healthy and gpus[1].name == "AMD Instinct MI300X"
    assert (gpus[2].memory_total, gpus[2].memory_free) == (None, None) and gpus[2].healthy
    simstate.lose_gpu(mixed, 1)
    simstate.lose_gpu(mixed, 2)
    nv, amd, intel = detect_gpus(mixed)
    assert nv.healthy and nv.memory_total == 80 * GIB
    assert not amd.healthy and "AMDSMI_STATUS_NOT_FOUND" in amd.error and amd.name is None
    assert not intel.healthy and "xpu-smi" in intel.error and intel.label == "xpu:0"


def test_simulated_amdsmi_speaks_amdsmi(mixed):
    lib = SimAmdSmi(SEED, mixed.sim_state_dir, "mix-1")
    with pytest.raises(AmdSmiLibraryException):
        lib.amdsmi_get_processor_handles()  # not initialised
    lib.amdsmi_init()
    (h,) = lib.amdsmi_get_processor_handles()
    assert lib.amdsmi_get_gpu_vram_usage(h)["vram_total"] == 192 * 1024  # MB
    assert lib.amdsmi_get_gpu_memory_total(h, lib.AmdSmiMemoryType.VRAM) == 192 * GIB  # bytes
    assert lib.amdsmi_get_power_info(h)["power_limit"] == 750  # W
    assert lib.amdsmi_get_gpu_activity(h)["mm_activity"] == "N/A"
    pid = simstate.add_foreign_process(mixed, 1, 2 * GIB, user="bob", name="jupyter")
    assert [(p["pid"], p["mem"]) for p in lib.amdsmi_get_gpu_process_list(h)] == [(pid, 2 * GIB)]
    simstate.refuse_field(mixed, 1, "power")
    with pytest.raises(AmdSmiLibraryException) as e:
        lib.amdsmi_get_power_info(h)
    assert e.value.get_error_code() == AMDSMI_STATUS_NOT_SUPPORTED
    # The same detection code reads a real amdsmi module: None when it cannot even start.
    class Broken:
        def amdsmi_init(self):
            raise OSError("libamd_smi.so not found")

    assert detect_amd_with(Broken(), 0) is None
    lib.amdsmi_shut_down()


def test_simulated_xpu_smi_answers_the_json_of_xpu_smi(mixed):
    smi = device_backend(mixed).xpusmi
    (d,) = smi.run("discovery")["device_list"]
    assert d["device_name"] == "Intel(R) Data Center GPU Max 1550" and d["vendor_name"] == "Intel(R) Corporation"
    assert int(smi.run("discovery", "-d", "0")["memory_physical_size_byte"]) == 128 * GIB
    m = stats_with(smi, 0)
    assert {"XPUM_STATS_GPU_UTILIZATION", "XPUM_STATS_POWER", "XPUM_STATS_MEMORY_USED"} <= set(m)
    simstate.refuse_field(mixed, 2, "temperature")
    assert "XPUM_STATS_GPU_CORE_TEMPERATURE" not in stats_with(smi, 0)
    assert [g.index for g in detect_with(smi, 5, simulated=True)] == [5]


def test_sampler_gives_each_vendor_its_own_fields(mixed):
    pid = simstate.add_foreign_process(mixed, 1, 10 * GIB, user="bob", name="jupyter")
    simstate.add_foreign_process(mixed, 2, 4 * GIB, user="carol", name="notebook")
    hs = HostSampler(mixed)
    try:
        s = {x.index: x for x in hs.sample()}
        nv, amd, intel = s[0], s[1], s[2]
        assert (nv.vendor, amd.vendor, intel.vendor) == ("nvidia", "amd", "intel")
        assert nv.pcie_tx is not None and nv.ecc_errors == 0
        # AMD: amdsmi's utilization, VRAM, temperature, power and processes; no PCIe counters, no XIDs.
        assert amd.utilization is not None and amd.memory_total == 192 * GIB
        assert amd.memory_used >= 10 * GIB and amd.temperature is not None
        assert amd.power_draw is not None and amd.power_limit == 750
        assert [(p.pid, p.user, p.used_memory, p.foreign) for p in amd.processes] == [(pid, "bob", 10 * GIB, True)]
        assert amd.pcie_tx is None and amd.xid_errors is None and amd.sm_clock is None
        # Intel: xpu-smi's stats; no power limit, no process list.
        assert intel.utilization is not None and intel.sm_clock and intel.power_draw is not None
        assert intel.memory_used >= 4 * GIB and intel.memory_total == 128 * GIB
        assert intel.power_limit is None and intel.processes == [] and intel.ecc_errors is None
        # One vendor's GPU lost: it says so, the others keep sampling.
        simstate.lose_gpu(mixed, 1)
        simstate.refuse_field(mixed, 2, "power")
        s = {x.index: x for x in hs.sample()}
        assert s[1].lost and "amdsmi" in s[1].error and s[1].utilization is None
        assert not s[2].lost and s[2].power_draw is None and s[2].utilization is not None
        assert not s[0].lost and s[0].utilization is not None
        simstate.lose_gpu(mixed, 2)
        s = {x.index: x for x in hs.sample()}
        assert s[2].lost and "xpu-smi" in s[2].error and not s[0].lost
    finally:
        hs.close()


def test_gpus_cli_prints_the_seed_table(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from gpufleet.cli import app
    from gpufleet.config import reset_settings_cache

    reset_settings_cache()
    r = CliRunner().invoke(app, ["gpus"], env={"COLUMNS": "200", "GPUFLEET_SIMULATE": SEED,
                                              "GPUFLEET_DATA_DIR": str(tmp_path / "d")})
    reset_settings_cache()
    assert r.exit_code == 0, r.output
    rows = [line.split() for line in r.output.splitlines()]
    header = next(row for row in rows if row[:1] == ["ID"])
    assert header[:6] == ["ID", "Vendor", "Model", "VRAM", "Free", "Backend"]
    lines = {row[0]: " ".join(row) for row in rows if row and row[0] in ("0", "1", "2")}
    assert re.match(r"0 NVIDIA NVIDIA H100 80GB HBM3 80(\.0)? GiB .* cuda:0 GPU-", lines["0"]), lines["0"]
    assert re.match(r"1 AMD AMD Instinct MI300X 192(\.0)? GiB .* hip:0 ", lines["1"]), lines["1"]
    assert re.match(r"2 Intel Intel\(R\) Data Center GPU Max 1550 128(\.0)? GiB .* xpu:0 ", lines["2"]), lines["2"]


def test_api_and_metrics_list_every_vendor(mixed):
    from gpufleet.api.app import create_app
    from gpufleet.db.session import upgrade_database
    from gpufleet.telemetry.inventory import register_host
    from gpufleet.telemetry.live import LOCAL

    upgrade_database(mixed)
    register_host(mixed)
    LOCAL.clear()
    hs = HostSampler(mixed)
    try:
        LOCAL.put_host(mixed.host_name, hs.sample())
        with TestClient(create_app(mixed)) as c:
            deadline = time.monotonic() + 60
            while True:
                body = c.get("/api/v1/system/gpus").json()
                if all(g["live"] for g in body["data"]) or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            got = [(g["index"], g["vendor"], g["backend"], g["name"], g["memory_total"] // GIB) for g in body["data"]]
            assert got == [
                (0, "nvidia", "cuda", "NVIDIA H100 80GB HBM3", 80),
                (1, "amd", "hip", "AMD Instinct MI300X", 192),
                (2, "intel", "xpu", "Intel(R) Data Center GPU Max 1550", 128),
            ]
            live = {g["index"]: g["live"] for g in body["data"]}
            assert live[1]["power_limit"] == 750 and live[2]["power_limit"] is None
            assert live[1]["temperature"] is not None and live[2]["utilization"] is not None

            fams = {f.name: f for f in text_string_to_metric_families(c.get("/metrics").text)}
            info = {smp.labels["gpu"]: (smp.labels["vendor"], smp.labels["backend"], smp.labels["model_name"])
                    for smp in fams["gpufleet_gpu_info"].samples}
            assert info == {"0": ("nvidia", "cuda", "NVIDIA H100 80GB HBM3"),
                            "1": ("amd", "hip", "AMD Instinct MI300X"),
                            "2": ("intel", "xpu", "Intel(R) Data Center GPU Max 1550")}
            util = {smp.labels["gpu"]: smp.labels["device"] for smp in fams["DCGM_FI_DEV_GPU_UTIL"].samples}
            assert util == {"0": "nvidia0", "1": "gpu1", "2": "gpu2"}
            limits = {smp.labels["gpu"] for smp in fams["DCGM_FI_DEV_POWER_MGMT_LIMIT"].samples}
            assert limits == {"0", "1"}  # Intel gives no power limit: no series, not a zero
    finally:
        hs.close()
        LOCAL.clear()


# ---------------------------------------------------------------------------
# The simulated amdsmi against the real package


def _real_amdsmi_signatures() -> dict[str, list[tuple[str, str | None]]]:
    spec = importlib.util.find_spec("amdsmi")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("the amdsmi package is not installed (pyproject's test extra installs it)")
    # Parsed, never imported: importing amdsmi needs ROCm's libamd_smi.so.
    src = Path(next(iter(spec.submodule_search_locations))) / "amdsmi_interface.py"
    out = {}
    for node in ast.parse(src.read_text()).body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("amdsmi_"):
            args = node.args.args
            defaults = [None] * (len(args) - len(node.args.defaults)) + [ast.unparse(d) for d in node.args.defaults]
            out[node.name] = [(a.arg, d) for a, d in zip(args, defaults)]
    return out


def test_simulated_amdsmi_matches_the_real_signatures():
    real = _real_amdsmi_signatures()
    ours = {n: getattr(SimAmdSmi, n) for n in dir(SimAmdSmi) if n.startswith("amdsmi_")}
    assert len(ours) >= 12
    for name, fn in ours.items():
        assert name in real, f"amdsmi has no {name}"
        params = list(inspect.signature(fn).parameters.values())[1:]  # past self
        got = [(p.name, None if p.default is inspect.Parameter.empty else p.default) for p in params]
        want = real[name]
        assert [n for n, _ in got] == [n for n, _ in want], name
        for (n, d), (_, wd) in zip(got, want):
            if wd is None:
                assert d is None, f"{name}({n}) has a default the real one lacks"
            else:
                assert d is not None and wd.endswith(getattr(d, "name", str(d))), f"{name}({n}={wd})"
