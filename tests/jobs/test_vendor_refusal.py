"""POST /api/v1/trainings refuses a rank on an unsupported backend, or GPUs of several vendors, writing nothing."""

from __future__ import annotations

import pytest
from gpufleet.db.models import GPU, Training, TrainingEvent
from gpufleet.db.session import session_scope
from sqlalchemy import func, select, update

from .conftest import TINY_SAE, register


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
        ({"backend": "hip", "vendor": "amd"}, ["GPUs of amd and nvidia in one job", "gloo",
                                               "pick GPUs of one vendor"]),
    ],
)
def test_unsupported_backend_or_mixed_vendors_are_refused(fleet_settings, client_for, relabel, words):
    register(fleet_settings)
    _relabel(fleet_settings, 1, **relabel)
    c = client_for(fleet_settings)
    before = _counts(fleet_settings)
    r = c.post("/api/v1/trainings", json={"name": "mix", "recipe": "sae", "config": TINY_SAE,
                                          "host": fleet_settings.host_name, "gpu_ids": [0, 1]})
    assert r.status_code == 422, r.text
    for w in words:
        assert w in r.text, r.text
    assert _counts(fleet_settings) == before
    # The GPU of the supported vendor alone is accepted.
    r = c.post("/api/v1/trainings", json={"name": "one", "recipe": "sae", "config": TINY_SAE,
                                          "host": fleet_settings.host_name, "gpu_ids": [0]})
    assert r.status_code == 201, r.text
