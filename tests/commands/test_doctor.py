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
        estimate_line("mlp", {"hidden": [4096, 4096]}, 4096, "bf16", 1500 * mib, 1562 * mib, "context 1"),
        "..",
        estimate_line("sae", {"d_in": 768}, 256, "fp32", 954 * mib, 1562 * mib, "context 2"),
    ])
    within, beyond = estimate_rows(output)
    assert (within.check, within.result, within.ok) == ("estimate mlp b4096 bf16", "1,500 / 1,562 MiB", True)
    assert "-3.97%" in within.detail
    assert (beyond.check, beyond.ok) == ("estimate sae b256 fp32", False) and "-38.92%" in beyond.detail
    # The GPU tests ran yet printed no estimate (all skipped): the table says so, as a failure.
    (none,) = estimate_rows("12 skipped in 3.2s")
    assert none.ok is False and none.result == "no cases ran"
