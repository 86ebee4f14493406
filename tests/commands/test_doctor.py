"""``gpufleet doctor`` on a machine without GPUs: it says so, checks what it can
(the simulated fleet's NVML and context) and prints one table."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

GPUFLEET = str(Path(sys.executable).with_name("gpufleet"))


def _doctor(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    return subprocess.run([GPUFLEET, "doctor", *args], capture_output=True, text=True, timeout=300,
                          env={**base, "GPUFLEET_DATA_DIR": str(tmp_path / "data"), "COLUMNS": "160", **env})


def test_without_gpus_it_says_so_and_checks_the_simulated_path(tmp_path: Path) -> None:
    done = _doctor(tmp_path, "--quick", GPUFLEET_SIM_CONTEXT_MB="777")
    assert done.returncode == 0, done.stderr
    # Piped, the table is tab-separated lines and its title goes to stderr (every list reads so when piped).
    out = done.stdout.replace("\t", " ")
    assert "No GPU on this machine" in out + done.stderr
    assert "gpufleet doctor" in out + done.stderr
    def row(name: str) -> str:
        (line,) = [x for x in out.splitlines() if x.strip().startswith(name)]
        return line

    assert "777 MiB" in row("CUDA context (simulated)")  # the configured simulated context
    assert " ms " in row("NVML sample (simulated)")
    assert " ok " in row("torch ")  # the installed torch is in the supported range
    assert "skipped" in row("gpu-marked tests") and "skipped" in row("DDP overhead")


def test_on_a_simulated_fleet_it_reads_that_fleet(tmp_path: Path) -> None:
    done = _doctor(tmp_path, "--quick", GPUFLEET_SIMULATE="2xA100-80GB", GPUFLEET_SIM_CONTEXT_MB="500")
    assert done.returncode == 0, done.stderr
    assert "No GPU on this machine" not in done.stdout
    assert "GPUs (simulated)" in done.stdout and "500 MiB" in done.stdout


def test_the_estimate_lines_of_the_gpu_test_become_rows_judged_by_the_bound() -> None:
    from gpufleet.commands.doctor_checks import estimate_line, estimate_rows

    mib = 2**20
    output = "\n".join([
        estimate_line("mlp", {"hidden": [4096, 4096]}, 4096, "bf16", 1550 * mib, 1562 * mib, "context 1",
                      first_step=1384 * mib),
        "..",
        estimate_line("sae", {"d_in": 768, "variant": "topk"}, 256, "fp32", 1500 * mib, 1562 * mib, "context 2"),
        estimate_line("sae", {"d_in": 768}, 4096, "fp32", 1660 * mib, 1562 * mib, "context 2"),
    ])
    within, under, over = estimate_rows(output)
    assert (within.check, within.result, within.ok) == ("estimate mlp b4096 bf16", "1,550 / 1,562 MiB", True)
    assert "-0.77%" in within.detail and "after step 1 1,384 MiB" in within.detail
    # Never under by more than 2 %, never over by more than 5 %: the reference runs' bound.
    # An SAE's variant is named, so topk and relu cases are told apart.
    assert (under.check, under.ok) == ("estimate sae topk b256 fp32", False) and "-3.97%" in under.detail
    assert (over.check, over.ok) == ("estimate sae b4096 fp32", False) and "+6.27%" in over.detail
    # The GPU tests ran yet printed no estimate (all skipped): the table says so, as a failure.
    (none,) = estimate_rows("12 skipped in 3.2s")
    assert none.ok is False and none.result == "no cases ran"


def test_the_gpu_tests_are_collected_alone_so_a_gpu_host_needs_no_test_only_package(tmp_path: Path) -> None:
    from gpufleet.commands.doctor_checks import estimate_line, gpu_test_files, gpu_tests_rows

    mib = 2**20
    line = estimate_line("mlp", {}, 256, "fp32", 1000 * mib, 1000 * mib, "context 1", first_step=900 * mib)
    (tmp_path / "tests" / "gpu").mkdir(parents=True)
    (tmp_path / "tests" / "web").mkdir()
    (tmp_path / "tests" / "gpu" / "test_step.py").write_text(
        "import pytest\n\n\n@pytest.mark.gpu\ndef test_step():\n"
        f"    print({line!r})\n")
    # A file of the suite that needs a package this host does not have: collecting it would fail.
    (tmp_path / "tests" / "web" / "test_browser.py").write_text(
        "import a_test_only_package_this_host_lacks\n\n\ndef test_page():\n    pass\n")
    assert gpu_test_files(tmp_path) == ["tests/gpu/test_step.py"]
    tests, estimate = gpu_tests_rows(tmp_path)
    assert (tests.check, tests.result, tests.ok) == ("gpu-marked tests", "passed", True), tests.detail
    assert "1 passed" in tests.detail
    assert estimate.ok is True and "after step 1 900 MiB" in estimate.detail
    # A checkout whose tests hold no gpu-marked file says so rather than passing on nothing.
    (tmp_path / "tests" / "gpu" / "test_step.py").unlink()
    (nothing,) = gpu_tests_rows(tmp_path)
    assert nothing.ok is False and nothing.result == "none found"
