"""POST /api/v1/trainings: a rank on an unsupported backend is refused, writing nothing; GPUs of several
vendors are taken by a recipe training (engine/parallel.py) and refused for a script training."""

from __future__ import annotations

import pytest
from gpufleet.db.models import GPU, Training, TrainingEvent
from gpufleet.db.session import session_scope
from sqlalchemy import func, select, update

from support.fleet import TINY_SAE, register


def _counts(settings):
    with session_scope(settings) as sess:
        return (sess.scalar(select(func.count()).select_from(Training)),
                sess.scalar(select(func.count()).select_from(TrainingEvent)))


def _relabel(settings, index: int, **values) -> None:
    from gpufleet.db.models import Host

    with session_scope(settings) as sess:
        host_id = sess.scalar(select(Host.id).where(Host.name == settings.host_name))
        sess.execute(update(GPU).where(GPU.host_id == host_id, GPU.index == index).values(**values))


@pytest.mark.parametrize(
    "relabel, words",
    [
        ({"backend": "mps", "vendor": "apple"}, ["GPU 1 on host", "cannot hold a rank",
                                                 "backend 'mps' is not one gpufleet trains on"]),
        ({"backend": "hip", "vendor": "nvidia"}, ["GPU 1 on host", "cannot hold a rank",
                                                  "backend 'hip' does not belong to vendor 'nvidia'"]),
    ],
)
def test_a_rank_on_an_unsupported_backend_is_refused(fleet_settings, client_for, relabel, words):
    register(fleet_settings)
    _relabel(fleet_settings, 1, **relabel)
    c = client_for(fleet_settings)
    before = _counts(fleet_settings)
    for mode in ("equal", "proportional", "independent"):
        r = c.post("/api/v1/trainings", json={"name": "mix", "recipe": "sae",
                                              "config": dict(TINY_SAE, parallel_mode=mode),
                                              "host": fleet_settings.host_name, "gpu_ids": [0, 1]})
        assert r.status_code == 422, r.text
        for w in words:
            assert w in r.text, r.text
    assert _counts(fleet_settings) == before
    # The GPU of the supported vendor alone is accepted.
    r = c.post("/api/v1/trainings", json={"name": "one", "recipe": "sae", "config": TINY_SAE,
                                          "host": fleet_settings.host_name, "gpu_ids": [0]})
    assert r.status_code == 201, r.text


def test_several_vendors_take_a_recipe_training_but_not_a_script(fleet_settings, client_for):
    register(fleet_settings)
    _relabel(fleet_settings, 1, backend="hip", vendor="amd")
    c = client_for(fleet_settings)
    before = _counts(fleet_settings)
    r = c.post("/api/v1/trainings", json={"name": "script", "kind": "script", "code": "0" * 64,
                                          "argv": ["python", "train.py"],
                                          "host": fleet_settings.host_name, "gpu_ids": [0, 1]})
    assert r.status_code == 422, r.text
    assert "GPUs of amd and nvidia" in r.text and "pick GPUs of one vendor" in r.text, r.text
    assert _counts(fleet_settings) == before
    r = c.post("/api/v1/trainings", json={"name": "mix", "recipe": "sae",
                                          "config": dict(TINY_SAE, parallel_mode="independent"),
                                          "host": fleet_settings.host_name, "gpu_ids": [0, 1]})
    assert r.status_code == 201, r.text
    assert r.json()["gpu_ids"] == [0, 1]


@pytest.mark.parametrize(
    "config, words",
    [
        ({"parallel_mode": "proportional", "rank_shares": [6, 6, 4]}, ["rank_shares", "3 shares given for 2 rank(s)"]),
        ({"parallel_mode": "proportional", "rank_shares": [6, 6]}, ["rank_shares", "must sum to global_batch_size 16"]),
        ({"parallel_mode": "independent", "grad_accum_steps": 2}, ["grad_accum_steps", "set grad_accum_steps to 1"]),
        ({"parallel_mode": "proportional", "strategy": "fsdp"}, ["strategy", "keeps a whole replica per rank"]),
        ({"parallel_mode": "sideways"}, ["parallel_mode"]),
    ],
)
def test_a_parallel_mode_that_cannot_run_is_refused(fleet_settings, client_for, config, words):
    register(fleet_settings)
    c = client_for(fleet_settings)
    before = _counts(fleet_settings)
    r = c.post("/api/v1/trainings", json={"name": "bad", "recipe": "sae", "config": dict(TINY_SAE, **config),
                                          "host": fleet_settings.host_name, "gpu_ids": [0, 1]})
    assert r.status_code == 422, r.text
    for w in words:
        assert w in r.text, r.text
    assert _counts(fleet_settings) == before
