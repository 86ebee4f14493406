"""The context probe runs what a training runs before it is measured.

On a GPU the probe's figure is NVML's used memory for its process less what its
caching allocator reserved. A probe that only initialised CUDA and ran one
matmul measured 676 MiB on an H200 where a trained process holds 742 (the
forward, backward, AdamW and autocast kernels come in lazily when they first
run), so the estimate built on it was under. These tests run the real probe
process on the CPU: its training steps run there as on a GPU, and NVML is a
test double with pynvml's functions (the GPU cannot exist here).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from gpufleet.devices.context_probe import PROBE, probe_one

MiB = 2**20


def test_the_probe_trains_a_step_in_every_precision_before_it_reports() -> None:
    proc = subprocess.Popen([sys.executable, "-c", PROBE, "0", "cpu"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline() if proc.stdout else ""
    out, err = proc.communicate("\n", timeout=120)
    assert proc.returncode == 0, err
    said = json.loads(line)
    assert said["pid"] == proc.pid
    # fp32 and autocast bf16 run on every device; fp16 only where CUDA has it.
    assert said["trained"] == ["fp32", "bf16"]
    assert said["reserved"] == 0


class _FakeNVML:
    """pynvml's process listing: the GPU's processes are this test's children, each holding ``used``."""

    def __init__(self, used: int) -> None:
        self.used, self.calls = used, []

    def nvmlInit(self) -> None:
        self.calls.append("init")

    def nvmlShutdown(self) -> None:
        self.calls.append("shutdown")

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return f"gpu{index}"

    def nvmlDeviceGetComputeRunningProcesses(self, handle: str) -> list[SimpleNamespace]:
        children = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == os.getpid():
                children.append(SimpleNamespace(pid=int(stat.parent.name), usedGpuMemory=self.used))
        return children


def test_the_context_is_what_nvml_says_the_probe_holds_less_its_allocator() -> None:
    nvml = _FakeNVML(742 * MiB)
    assert probe_one(nvml, 0, device="cpu") == 742 * MiB
    assert nvml.calls == ["init", "shutdown"]


def test_a_probe_nvml_does_not_list_measures_nothing() -> None:
    # A container without the host's PID namespace: the driver lists no process of ours.
    assert probe_one(_FakeNVML(0), 0, device="cpu") is None
