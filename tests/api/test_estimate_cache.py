"""A viewer's first `recommend?recipe=sae` finds its trace ready: warmed when the server starts, kept on disk.

It took more than 10 s on a busy machine: the first estimate started the
pool's process (importing torch) and paid the first trace's warm-up. The pool
counts the processes it starts and the traces it runs, so these tests show
what was saved without timing it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpufleet.api.app import create_app
from gpufleet.api.routes.selection import warm_estimates
from gpufleet.config import Settings, load_settings
from gpufleet.db.session import upgrade_database
from gpufleet.scheduling.memory import forget_traces


def test_warming_traces_the_recipes_defaults_so_the_first_request_traces_nothing(
        sim_app_settings: Settings) -> None:
    forget_traces()
    app = create_app(sim_app_settings)
    with TestClient(app) as client:
        client.portal.call(warm_estimates, app, sim_app_settings)
        pool = app.state.estimate_pool
        assert pool.started == 1 and pool.traced >= 2  # one process, every installed recipe
        started, traced = pool.started, pool.traced
        r = client.get("/api/v1/system/gpus/recommend?recipe=sae")
        assert r.status_code == 200, r.text
        assert r.json()["estimate"]["total"] > 0
        assert (pool.started, pool.traced) == (started, traced)
        # A second warm-up (a restart on the same data dir) has nothing left to do.
        client.portal.call(warm_estimates, app, sim_app_settings)
        assert (pool.started, pool.traced) == (started, traced)


def test_a_restarted_server_reads_the_trace_from_disk(sim_app_settings: Settings) -> None:
    forget_traces()
    url = "/api/v1/system/gpus/recommend?recipe=sae&config=%7B%22n_latents%22%3A%201024%7D"
    first = create_app(sim_app_settings)
    with TestClient(first) as client:
        before = client.get(url)
        assert before.status_code == 200, before.text
        assert first.state.estimate_pool.traced == 1
    forget_traces()  # what a restart forgets
    second = create_app(sim_app_settings)
    with TestClient(second) as client:
        after = client.get(url)
        assert after.status_code == 200, after.text
        pool = second.state.estimate_pool
        assert (pool.started, pool.traced) == (0, 0)
    assert after.json()["estimate"] == before.json()["estimate"]
    assert list((sim_app_settings.data_dir / "estimates").glob("*.json"))


@pytest.mark.parametrize("warm", [True, False])
def test_serve_loads_torch_ahead_only_with_the_warm_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       warm: bool) -> None:
    """`serve`'s background threads (start_background) start torch's import beside the API only when
    GPUFLEET_ESTIMATE_WARM is on. The import is held open here, so its thread is seen whatever the timing."""
    import threading

    from gpufleet.api import app as app_module

    release = threading.Event()
    monkeypatch.setattr(app_module, "_warm_torch", release.wait)
    settings = load_settings(data_dir=tmp_path / "d", simulate="2xH100-80GB", estimate_warm=warm)
    upgrade_database(settings)
    stop = threading.Event()
    threads = app_module.start_background(settings, stop)
    try:
        importing = [t for t in threading.enumerate() if t.name == "gpufleet-warm-torch" and t.is_alive()]
        assert len(importing) == (1 if warm else 0), importing
    finally:
        release.set()
        stop.set()
        for t in threads:
            t.join(timeout=10)


def test_serve_answers_only_once_torch_is_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ready means warm: the lifespan waits for torch's import before the first request is answered,
    so a server that said it was up does not then stall for as long as the import holds the GIL.
    The import is replaced by one that ends only when released."""
    import threading
    import time

    from gpufleet.api import app as app_module

    release = threading.Event()
    loaded: list[float] = []

    def importing() -> None:
        release.wait(30)
        loaded.append(time.monotonic())

    monkeypatch.setattr(app_module, "_warm_torch", importing)
    settings = load_settings(data_dir=tmp_path / "d", simulate="2xH100-80GB", estimate_warm=True)
    upgrade_database(settings)
    # The recipes' warm-up traces are not what this is about; they start after the wait, in the pool.
    monkeypatch.setattr("gpufleet.api.routes.selection.warm_estimates", _nothing)
    threading.Timer(0.5, release.set).start()
    with TestClient(create_app(settings, background=True)) as client:
        answered = time.monotonic()
        assert client.get("/healthz").status_code == 200
    assert loaded and loaded[0] <= answered


async def _nothing(*_: object) -> None:
    return None
