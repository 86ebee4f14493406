"""Independent training of two groups merged every H steps, against one job on the same samples."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from gpufleet.engine import checkpoint as ckpt
from gpufleet.engine.distributed import find_free_port
from gpufleet.engine.localsgd import average_replicas, merge_checkpoints, merge_states
from support.ranks import leave

H = 10
STEPS = 300
BATCH = 128  # per group; the single job takes 2 x BATCH per step


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))


def _data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    # A noisy target: both runs should reach the noise floor, and the question is whether the merge does.
    y = torch.sin(x[:, :1] * 2) + 0.5 * x[:, 1:2] * x[:, 2:3] + 0.3 * torch.randn(n, 1, generator=g)
    return x, y


def _loss(model, x, y) -> torch.Tensor:
    return ((model(x) - y) ** 2).mean()


def _train(model, opt, x, y, steps: int, batch: int, merge: bool) -> None:
    for step in range(steps):
        sl = slice(step * batch, (step + 1) * batch)
        opt.zero_grad()
        _loss(model, x[sl], y[sl]).backward()
        opt.step()
        if merge and (step + 1) % H == 0:
            average_replicas(model)


def _group(rank: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        x, y = _data(2 * STEPS * BATCH, 1)
        mine = slice(rank * STEPS * BATCH, (rank + 1) * STEPS * BATCH)  # each group its own shard
        model = _model()
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        _train(model, opt, x[mine], y[mine], STEPS, BATCH, merge=True)
    finally:
        dist.destroy_process_group()
    # Each group is its own training: it saves its replica as the trainer saves a checkpoint.
    model_state, optim_state = ckpt.gather_state(model, opt)
    ckpt.write_checkpoint(f"{out}/group-{rank}", STEPS, model_state=model_state, optim_state=optim_state,
                          train_state={"step": STEPS, "samples_seen": STEPS * BATCH},
                          meta={"recipe": "toy"}, keep=1)
    leave()


def test_two_groups_merged_every_h_steps_match_the_single_job_and_the_merge_resumes(tmp_path):
    xv, yv = _data(4096, 7)
    # The single job: the same samples, 2 x BATCH per step.
    x, y = _data(2 * STEPS * BATCH, 1)
    order = torch.cat([torch.arange(STEPS * BATCH).view(STEPS, BATCH),
                       STEPS * BATCH + torch.arange(STEPS * BATCH).view(STEPS, BATCH)], 1).reshape(-1)
    single = _model()
    sopt = torch.optim.Adam(single.parameters(), lr=1e-2)
    _train(single, sopt, x[order], y[order], STEPS, 2 * BATCH, merge=False)
    single_loss = _loss(single, xv, yv).item()

    mp.start_processes(_group, args=(find_free_port(), str(tmp_path)), nprocs=2, start_method="spawn")
    g0 = ckpt.newest_checkpoint(tmp_path / "group-0")
    g1 = ckpt.newest_checkpoint(tmp_path / "group-1")
    merged_path = merge_checkpoints([g0, g1], tmp_path / "merged")
    assert merged_path.name == f"step-{STEPS}" and ckpt.newest_checkpoint(tmp_path / "merged") == merged_path

    merged = ckpt.load_checkpoint(merged_path)  # an ordinary checkpoint
    assert merged["state"]["samples_seen"] == 2 * STEPS * BATCH and merged["meta"]["recipe"] == "toy"
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    ckpt.apply_state(model, opt, merged["model"], merged["optimizer"])
    merged_loss = _loss(model, xv, yv).item()
    start = _loss(_model(), xv, yv).item()
    assert merged_loss < 0.5 * start  # it learned
    assert abs(merged_loss - single_loss) <= 0.05 * single_loss, (merged_loss, single_loss)

    # The merge is the replicas' mean.
    r0, r1 = ckpt.load_checkpoint(g0)["model"], ckpt.load_checkpoint(g1)["model"]
    for k, v in merged["model"].items():
        assert torch.allclose(v, (r0[k] + r1[k]) / 2, atol=1e-7), k

    # It resumes: training goes on from the merged weights and optimizer state and stays at the merged loss.
    before = [p.detach().clone() for p in model.parameters()]
    xr, yr = _data(20 * 2 * BATCH, 11)
    _train(model, opt, xr, yr, 20, 2 * BATCH, merge=False)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert _loss(model, xv, yv).item() <= 1.05 * merged_loss


def test_merge_states_averages_and_refuses_mismatches():
    a = {"w": torch.ones(2), "n": torch.tensor(3), "groups": [{"lr": 0.1}]}
    b = {"w": torch.zeros(2), "n": torch.tensor(5), "groups": [{"lr": 0.1}]}
    m = merge_states([a, b])
    assert torch.equal(m["w"], torch.full((2,), 0.5)) and int(m["n"]) == 3 and m["groups"] == [{"lr": 0.1}]
    assert torch.allclose(merge_states([a, b], weights=[3, 1])["w"], torch.full((2,), 0.75))
    with pytest.raises(ValueError, match="keys"):
        merge_states([a, {"w": torch.ones(2)}])
    with pytest.raises(ValueError, match="shape"):
        merge_states([{"w": torch.ones(2)}, {"w": torch.ones(3)}])

