"""Helpers for the training tests: run the real launcher as a subprocess and
look for any process it left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from gpufleet.engine.progress import read_progress


def tiny_sae(**over: Any) -> dict[str, Any]:
    cfg = dict(d_in=16, n_latents=64, k=4, synthetic_features=32, synthetic_samples=2048,
               global_batch_size=32, max_steps=20, log_every=5, checkpoint_every=10, lr=3e-3)
    cfg.update(over)
    return cfg


def tiny_mlp(**over: Any) -> dict[str, Any]:
    cfg = dict(in_features=8, hidden=[16, 16], out_features=3, task="classification",
               synthetic_samples=2048, global_batch_size=32, max_steps=20, log_every=5,
               checkpoint_every=10, lr=3e-3)
    cfg.update(over)
    return cfg


class Launch:
    """One launcher subprocess with a unique marker in its environment, so
    every descendant (ranks, helpers) can be found in /proc afterwards."""

    def __init__(self, tmp: Path, recipe: str, config: dict[str, Any], devices: list[str],
                 env: dict[str, str] | None = None, **spec_fields: Any):
        self.dir = tmp
        self.marker = uuid.uuid4().hex
        self.spec = {"recipe": recipe, "config": config, "devices": devices,
                     "checkpoint_dir": str(tmp / "ckpt"), "progress_file": str(tmp / "progress.jsonl"),
                     "collective_timeout_s": 30.0, **spec_fields}
        self.spec_path = tmp / "spec.json"
        self.spec_path.write_text(json.dumps(self.spec))
        self.env = {**os.environ, "GPUFLEET_TEST_MARKER": self.marker, **(env or {})}
        self.proc: subprocess.Popen | None = None

    def start(self) -> "Launch":
        self.proc = subprocess.Popen([sys.executable, "-m", "gpufleet.engine.launch", str(self.spec_path)],
                                     env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return self

    def wait(self, timeout: float = 120) -> int:
        assert self.proc is not None
        try:
            self.out, self.err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.out, self.err = self.proc.communicate()
            raise
        return self.proc.returncode

    def run(self, timeout: float = 120) -> int:
        return self.start().wait(timeout)

    @property
    def records(self) -> list[dict[str, Any]]:
        return read_progress(self.spec["progress_file"])

    def of_type(self, t: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r["type"] == t]

    def survivors(self) -> list[int]:
        return processes_with_marker(self.marker)

    def wait_for(self, pred, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred(self.records):
                return
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"launcher exited early: {self.proc.returncode}\n{self.proc.stderr.read()}")
            time.sleep(0.1)
        raise AssertionError(f"timed out; progress: {self.records}")


def processes_with_marker(marker: str) -> list[int]:
    found = []
    needle = f"GPUFLEET_TEST_MARKER={marker}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if needle in fh.read():
                    with open(f"/proc/{entry}/stat") as st:
                        if st.read().split()[2] == "Z":  # a zombie is gone, only not reaped
                            continue
                    found.append(int(entry))
        except OSError:
            continue
    return found


@pytest.fixture
def launch_factory(tmp_path: Path):
    made: list[Launch] = []

    def make(recipe: str, config: dict[str, Any], devices: list[str], sub: str = "run", **kw: Any) -> Launch:
        d = tmp_path / sub
        d.mkdir()
        launch = Launch(d, recipe, config, devices, **kw)
        made.append(launch)
        return launch

    yield make
    for launch in made:  # never leave a process behind, even when a test fails
        if launch.proc is not None and launch.proc.poll() is None:
            launch.proc.kill()
            launch.proc.wait()
        for pid in launch.survivors():
            try:
                os.kill(pid, 9)
            except OSError:
                pass


@pytest.fixture(autouse=True)
def _one_torch_thread():
    # In-process trainings here are tiny; several spinning OpenMP threads on a
    # shared CI machine only slow them down (spawned ranks set their own).
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
