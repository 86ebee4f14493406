"""A simulated host registered in a real database, sampled through the simulated NVML."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
import threading
import uuid

import pytest

from gpufleet.config import Settings, load_settings
from gpufleet.db.session import upgrade_database
from gpufleet.telemetry.live import LOCAL


def sample_into_live(settings: Settings) -> None:
    """One sampler round, published where read_live_samples looks (this process)."""
    from gpufleet.devices.backend import device_backend
    from gpufleet.telemetry.sampler import NvmlSampler

    sampler = NvmlSampler(settings, settings, device_backend(settings))
    try:
        LOCAL.put_host(settings.host_name, sampler.sample())
    finally:
        sampler.close()


@pytest.fixture
def sim_host(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[..., Settings]]:
    """``sim_host(topology, spec)`` registers a simulated host and samples it once."""
    from gpufleet.telemetry.inventory import register_host

    db_url = None
    if getattr(request, "param", "sqlite") == "postgresql":
        # A database of the test's own: auto-selected trainings other tests left queued
        # would otherwise take this test's free GPUs.
        db_url = request.getfixturevalue("fresh_migrated_pg_url")

    made: list[Settings] = []

    def make(topology: str = "nvlink-pairs", spec: str = "8xH100-80GB", name: str | None = None) -> Settings:
        # The hosts of one test share its database: a name of its own each.
        name = name or f"sim-{uuid.uuid4().hex[:8]}"
        s = load_settings(data_dir=tmp_path / "data", simulate=spec, simulate_topology=topology,
                          host_name=name, database_url=db_url)
        upgrade_database(s)
        register_host(s)
        sample_into_live(s)
        made.append(s)
        return s

    # No agent runs here: beat for the hosts, or a test slower than the offline
    # threshold (30 s, reached on a loaded machine) would see them offline.
    stop = threading.Event()

    def beat() -> None:
        from gpufleet.telemetry.inventory import heartbeat

        while not stop.wait(5.0):
            for s in list(made):
                try:
                    heartbeat(s, s)
                except Exception:  # noqa: BLE001 - a test may have dropped its database already
                    pass

    beater = threading.Thread(target=beat, name="sim-host-heartbeats", daemon=True)
    beater.start()
    LOCAL.clear()
    try:
        yield make
    finally:
        stop.set()
        beater.join(10)
        LOCAL.clear()
