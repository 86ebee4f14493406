"""One training across hosts: two or three `gpufleet worker` processes with their own
host names on this machine, gloo ranks on the CPU, PostgreSQL and Redis."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from .conftest import FINAL, make_settings, register, unique, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]

MLP = dict(in_features=8, hidden=[16, 16], out_features=3, task="classification", synthetic_samples=2048,
           global_batch_size=32, max_steps=20, log_every=5, checkpoint_every=10, lr=3e-3)


def gang_host(tmp_path: Path, request, name: str, shared: Path | None = None, **kw):
    return make_settings(tmp_path / name, "postgresql", request, simulate="2xH100-80GB",
                         host_name=unique(name), checkpoint_root=shared or tmp_path / "shared-checkpoints",
                         advertise_address="127.0.0.1", network_interface="lo", rendezvous_timeout_s=90, **kw)


def final(c, tid: str, timeout: float = 300) -> dict:
    return wait_for(lambda: (b := c.get(f"/api/v1/trainings/{tid}").json())["status"] in FINAL and b,
                    timeout, f"training {tid} to end", 0.3)


def test_four_ranks_on_two_hosts_match_one_process(tmp_path, request, client_for, workers, scheduler):
    a, b = gang_host(tmp_path, request, "a"), gang_host(tmp_path, request, "b")
    register(a), register(b)
    workers(a), workers(b)
    scheduler(a)
    c = client_for(a)
    r = c.post("/api/v1/trainings", json={"name": "across", "recipe": "mlp", "config": MLP,
                                          "hosts": [a.host_name, b.host_name], "gpus_per_host": 2})
    assert r.status_code == 201, r.text
    tid = r.json()["id"]
    body = final(c, tid)
    assert body["status"] == "succeeded", (body, (a.logs_dir / "trainings" / f"{tid}.log").read_text())
    # Both hosts ran ranks: host b's worker wrote its part of the log.
    other = (b.logs_dir / "trainings" / f"{tid}-{b.host_name}.log").read_text()
    assert "ranks 2-3 of 4" in other and "launcher exited with 0" in other
    from gpufleet.training.recipes import get_recipe
    from gpufleet.training.trainer import Trainer

    recipe = get_recipe("mlp")
    single = Trainer(recipe, recipe.resolve_config(MLP), devices=["cpu"])
    assert single.train().step == 20
    one = single.raw_model.state_dict()
    four = torch.load(tmp_path / "shared-checkpoints" / tid / "step-20" / "model.pt", weights_only=True)
    assert four.keys() == one.keys()
    diff = max((one[k].double() - four[k].double()).abs().max().item() for k in one)
    assert diff < 1e-5, f"4 ranks on 2 hosts differ from 1 process by {diff}"
    metrics = c.get(f"/api/v1/trainings/{tid}/metrics").json()["data"]
    assert metrics and all(len(m["rank_step_times"]) == 4 for m in metrics if m.get("rank_step_times"))
