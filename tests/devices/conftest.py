"""Fixtures for the devices tests: settings for a simulated fleet of any shape."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpufleet.config import Settings, load_settings
from gpufleet.devices.backend import device_backend


@pytest.fixture
def make_sim(tmp_path: Path) -> Callable[..., Settings]:
    """``make_sim("2xH100-80GB", "pcie")`` -> Settings with their own state dir."""
    counter = iter(range(1000))

    def make(spec: str, topology: str = "nvlink-all", host_name: str = "sim-host") -> Settings:
        return load_settings(
            data_dir=tmp_path / f"data-{next(counter)}",
            simulate=spec,
            simulate_topology=topology,
            host_name=host_name,
        )

    return make


@pytest.fixture
def nvml(sim_settings):
    """The simulated NVML of ``sim_settings``' host, initialised for the test and shut down after it."""
    n = device_backend(sim_settings).nvml
    n.nvmlInit()
    yield n
    n.nvmlShutdown()
