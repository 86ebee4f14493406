"""Two gloo ranks (DDP, and FSDP) on a global batch of B end with the same
parameters as one process on the same batch, for the SAE and the MLP, and so does a layout with
half the micro batch and twice the accumulation (the out-of-memory rebalance)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gpufleet.engine.recipes import get_recipe
from gpufleet.engine.trainer import Trainer

from .conftest import tiny_mlp, tiny_sae

# TopK SAE with AuxK switched on early (dead after 3 steps), so the dead-latent
# bookkeeping across ranks is part of what must match.
CASES = {
    "sae": tiny_sae(max_steps=20, dead_steps=3, aux_coeff=0.1, checkpoint_every=100),
    "mlp": tiny_mlp(max_steps=20, checkpoint_every=100),
}


def _single(recipe: str, config: dict, ckpt: Path | None = None) -> tuple[dict, Trainer]:
    r = get_recipe(recipe)
    t = Trainer(r, r.resolve_config(config), devices=["cpu"], checkpoint_dir=ckpt)
    result = t.train()
    assert result.step == 20
    return {k: v.detach().clone() for k, v in t.raw_model.state_dict().items()}, t


def _max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_two_ranks_match_one_process(launch_factory, strategy):
    launches = {name: launch_factory(name, {**cfg, "strategy": strategy}, ["cpu", "cpu"], sub=name).start()
                for name, cfg in CASES.items()}
    for name, launch in launches.items():
        assert launch.wait(timeout=180) == 0, launch.err
        single, trainer = _single(name, CASES[name])
        two = torch.load(Path(launch.spec["checkpoint_dir"]) / "step-20" / "model.pt", weights_only=True)
        # The unwrapped (and, under FSDP, gathered) model was saved.
        assert two.keys() == single.keys()
        diff = _max_diff(single, two)
        assert diff < 1e-5, f"{name} {strategy}: 2 ranks differ from 1 process by {diff}"
        # The runs really trained (not two copies of the initial weights).
        r = get_recipe(name)
        torch.manual_seed(CASES[name].get("seed", 0))
        init = r.build_model(r.resolve_config(CASES[name])).state_dict()
        assert _max_diff(init, two) > 1e-3
        steps = launch.of_type("step")
        assert [s["step"] for s in steps] == [5, 10, 15, 20]
        assert all(len(s["rank_step_times"]) == 2 for s in steps)
        assert abs(steps[-1]["loss"] - trainer.last_metrics["loss"]) < 1e-5
        if name == "sae":
            assert any(s["parts"]["auxiliary"] > 0 for s in steps)  # AuxK was active
        assert launch.of_type("peak_memory")[-1]["per_rank"][1] > 0


def test_accumulation_layout_matches_one_big_batch():
    for name, cfg in CASES.items():
        whole, _ = _single(name, cfg)
        split, _ = _single(name, {**cfg, "micro_batch_size": 8, "grad_accum_steps": 4})
        assert _max_diff(whole, split) < 1e-5, name
