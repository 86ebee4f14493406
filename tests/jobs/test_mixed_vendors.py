"""GPUs of three vendors in one training, end to end: POST /api/v1/trainings with gpu_ids 0,1,2 on a
simulated NVIDIA + AMD + Intel host, the scheduler, a real Celery worker, the launcher and its ranks
(CPU ranks labelled as the three vendors), in each parallel_mode."""

from __future__ import annotations

import pytest
import torch
from gpufleet.engine import checkpoint as ckpt

from support.fleet import FINAL, get_events, make_settings, register, wait_status

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]

MIXED = "1xH100-80GB+1xMI300X-192GB+1xMAX1550-128GB"
MLP = {"in_features": 8, "hidden": [16, 16], "out_features": 3, "task": "classification",
       "synthetic_samples": 2048, "global_batch_size": 48, "max_steps": 12, "log_every": 3,
       "checkpoint_every": 6, "lr": 3e-3}


@pytest.fixture
def mixed_settings(tmp_path, request):
    return make_settings(tmp_path, "postgresql", request, simulate=MIXED)


@pytest.mark.parametrize("mode", ["equal", "proportional", "independent"])
def test_three_vendors_train_in_each_mode(mixed_settings, client_for, workers, scheduler, mode):
    register(mixed_settings)
    workers(mixed_settings)
    scheduler(mixed_settings)
    c = client_for(mixed_settings)
    r = c.post("/api/v1/trainings", json={"name": f"mix-{mode}", "recipe": "mlp",
                                          "config": dict(MLP, parallel_mode=mode, merge_every=4),
                                          "host": mixed_settings.host_name, "gpu_ids": [0, 1, 2]})
    assert r.status_code == 201, r.text
    tid = r.json()["id"]
    body = wait_status(c, tid, FINAL, 300)
    assert body["status"] == "succeeded", body
    assert body["step"] == 12 and [g["index"] for g in body["gpus"]] == [0, 1, 2]
    ev = get_events(c, tid)
    start = next(e for e in ev if e["kind"] == "info" and "world_size" in (e["data"] or {}))
    assert start["data"]["devices"] == ["cuda:0", "hip:0", "xpu:0"] and start["data"]["world_size"] == 3
    # The warning about the cost of one gloo process group across vendors.
    (warn,) = [e for e in ev if e["kind"] == "warning" and (e["data"] or {}).get("code") == "mixed-vendors"]
    assert "gloo" in warn["reason"] and f"parallel_mode {mode}" in warn["reason"]
    # What each rank ran on, as it saw it.
    (layout,) = [e for e in ev if e["kind"] == "info" and "per_rank" in (e["data"] or {})]
    ranks = layout["data"]["per_rank"]
    assert [r["visible"] for r in ranks] == [{"CUDA_VISIBLE_DEVICES": "0"}, {"HIP_VISIBLE_DEVICES": "0"},
                                             {"ZE_AFFINITY_MASK": "0"}]
    assert {r["process_group"] for r in ranks} == {"gloo"}
    if mode == "proportional":
        # The first shares follow the data sheets (MI300X > H100 > Max 1550), then measured speed.
        first = layout["data"]["shares"]
        assert sum(first) == 48 and first[1] > first[0] > first[2], first
    state = ckpt.load_checkpoint(mixed_settings.checkpoint_root / tid / "step-12")
    assert state["meta"]["config"]["parallel_mode"] == mode
    assert state["state"]["samples_seen"] == 12 * 48
    if mode == "independent":
        assert state["state"]["parallel"] == {"mode": "independent"}
    else:
        shares = state["state"]["parallel"]["shares"]
        assert len(shares) == 3 and sum(shares) == 48
        if mode == "equal":
            assert shares == [16, 16, 16]
    model = torch.load(mixed_settings.checkpoint_root / tid / "step-12" / "model.pt", weights_only=True)
    assert all(torch.isfinite(t).all() for t in model.values())
