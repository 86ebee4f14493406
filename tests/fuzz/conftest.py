"""A live app on a simulated fleet, signed in as an admin, for the schema fuzzer."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.config import Settings, load_settings

SECRET = "fuzz-secret-" + "y" * 40


@pytest.fixture
def fuzz_settings(tmp_path: Path) -> Settings:
    return load_settings(
        data_dir=tmp_path / "gpufleet-data",
        simulate="4xH100-80GB",
        simulate_topology="nvlink-pairs",
        host_name="fuzz-host",
        auth="on",
        secret_key=SECRET,
        # The fuzzer creates trainings as fast as it can; limits are tested elsewhere.
        create_rate_per_minute=10000,
    )
