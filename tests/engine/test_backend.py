"""gpufleet.TrainingBackend: the same loop on one device, DDP over 2 ranks and FSDP over 2 ranks.

Real processes with gloo on CPU; the ranks get the torchrun environment the
script launcher gives them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from torch import nn

import gpufleet
from gpufleet.engine.backend import make_backend
from support.ranks import leave
from support.servers import free_port

STEPS = 20
GLOBAL_BATCH = 16


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4), nn.Tanh(), nn.Linear(4, 1))


def _loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> dict[str, torch.Tensor]:
    x, y = batch
    err = model(x) - y
    return {"loss": err.pow(2).mean(), "mae": err.abs().mean().detach()}


def _opt(params):
    return torch.optim.AdamW(params, lr=1e-2, weight_decay=0.01)


def _data() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(GLOBAL_BATCH, 8, generator=g), torch.randn(GLOBAL_BATCH, 1, generator=g))
            for _ in range(STEPS)]


def _loop(backend, data, rank: int, world: int, start: int = 0, stop: int = STEPS) -> list[float]:
    """The user's loop: exactly the same code for every strategy."""
    share = GLOBAL_BATCH // world
    losses = []
    for x, y in data[start:stop]:
        out = backend.forward_backward((x[rank * share:(rank + 1) * share], y[rank * share:(rank + 1) * share]))
        backend.optim_step()
        losses.append(out["loss"])
    return losses


def _rank_main(rank: int, world: int, port: int, strategy: str, out_dir: str, resume: bool) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    data = _data()
    backend = make_backend(_model(), _loss, _opt, strategy=strategy)
    if resume:
        _loop(backend, data, rank, world, 0, STEPS // 2)
        backend.save_checkpoint(Path(out_dir) / "half.pt")
        backend = make_backend(_model(), _loss, _opt, strategy=strategy)
        backend.load_checkpoint(Path(out_dir) / "half.pt")
        assert backend.step == STEPS // 2
        _loop(backend, data, rank, world, STEPS // 2, STEPS)
    else:
        _loop(backend, data, rank, world)
    state = backend.state_dict()
    if rank == 0:
        torch.save(state["model"], Path(out_dir) / "final.pt")
    leave()


@pytest.fixture(scope="module")
def single_device_params() -> dict[str, torch.Tensor]:
    backend = make_backend(_model(), _loss, _opt, strategy="single", device="cpu")
    assert isinstance(backend, gpufleet.TrainingBackend)
    losses = _loop(backend, _data(), 0, 1)
    assert losses[-1] < losses[0]
    return {k: v.detach().clone() for k, v in backend.state_dict()["model"].items()}


def _distributed(tmp_path: Path, strategy: str, resume: bool = False) -> dict[str, torch.Tensor]:
    mp.start_processes(_rank_main, args=(2, free_port(), strategy, str(tmp_path), resume), nprocs=2,
                       join=True, start_method="spawn")
    return torch.load(tmp_path / "final.pt", weights_only=True)


def _assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()  # unwrapped names: no "module." prefix
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=1e-5, rtol=0, msg=lambda m, k=k: f"{k}: {m}")


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_same_parameters_after_20_steps(tmp_path, single_device_params, strategy):
    _assert_same(single_device_params, _distributed(tmp_path, strategy))


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_checkpoint_half_way_resumes_to_the_same_parameters(tmp_path, single_device_params, strategy):
    _assert_same(single_device_params, _distributed(tmp_path, strategy, resume=True))


def test_single_device_checkpoint_round_trip(tmp_path, single_device_params):
    data = _data()
    b = make_backend(_model(), _loss, _opt, strategy="single", device="cpu")
    _loop(b, data, 0, 1, 0, 7)
    b.save_checkpoint(tmp_path / "c.pt")
    b2 = make_backend(_model(), _loss, _opt, strategy="single", device="cpu")
    b2.load_checkpoint(tmp_path / "c.pt")
    _loop(b2, data, 0, 1, 7, STEPS)
    _assert_same(single_device_params, b2.state_dict()["model"])


def test_metrics_and_errors():
    b = make_backend(_model(), _loss, _opt, device="cpu")
    out = b.forward_backward(_data()[0])
    assert set(out) == {"loss", "mae"} and all(isinstance(v, float) for v in out.values())
    with pytest.raises(ValueError, match="not one of single, ddp, fsdp"):
        make_backend(_model(), _loss, _opt, strategy="zero3")


def test_accumulation_schedule_and_post_step_run_in_the_backend():
    """The options the recipes use: two half batches then one step equal one whole
    batch; the LR schedule steps with the optimizer; post_step runs after it."""
    data = _data()
    whole = make_backend(_model(), _loss, _opt, strategy="single", device="cpu", grad_clip=1.0)
    halves = make_backend(_model(), _loss, _opt, strategy="single", device="cpu", grad_clip=1.0, grad_accum=2,
                          lr_lambda=lambda step: 1.0)
    for x, y in data[:5]:
        whole.forward_backward((x, y))
        whole.optim_step()
        for i in range(2):
            halves.forward_backward((x[i * 8:(i + 1) * 8], y[i * 8:(i + 1) * 8]))
        halves.optim_step()
    _assert_same(whole.state_dict()["model"], halves.state_dict()["model"])
    assert halves.scheduler.last_epoch == 5 and "scheduler" in halves.state_dict()

    calls = []
    model = _model()
    model.post_step = lambda: calls.append(backend.step)
    backend = make_backend(model, _loss, _opt, strategy="single", device="cpu",
                           lr_lambda=lambda step: 0.5 ** step)
    for x, y in data[:3]:
        backend.forward_backward((x, y))
        backend.optim_step()
    assert calls == [0, 1, 2]
    assert backend.optimizer.param_groups[0]["lr"] == pytest.approx(1e-2 * 0.5 ** 3)


def test_the_recipe_trainer_runs_on_the_backend():
    from gpufleet.engine.recipes import get_recipe
    from gpufleet.engine.trainer import Trainer

    from .conftest import tiny_mlp

    r = get_recipe("mlp")
    t = Trainer(r, r.resolve_config(tiny_mlp(max_steps=2)), devices=["cpu"])
    t.setup()
    assert isinstance(t.backend, gpufleet.TrainingBackend)
    assert t.model is t.backend.model and t.optimizer is t.backend.optimizer
    assert t.train().status == "succeeded" and t.backend.step == 2
