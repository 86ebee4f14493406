"""parallel_mode through the real launcher and Trainer: speed-proportional shares, independent vendor
groups with a merge, exact resume, and each rank's device, visibility variable and precision."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from gpufleet.engine import checkpoint as ckpt
from gpufleet.engine import exitcodes
from gpufleet.engine.recipes import get_recipe

from .conftest import tiny_mlp

pytestmark = pytest.mark.slow

MIXED = ["cuda:0", "hip:0", "xpu:0"]


def _params(run_dir: Path, step: int) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "ckpt" / f"step-{step}" / "model.pt", weights_only=True)


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a)


def _full_loss(config: dict, params: dict[str, torch.Tensor]) -> float:
    """The model's mean loss over the whole (synthetic) data set: one number two runs can be compared by."""
    recipe = get_recipe("mlp")
    cfg = recipe.resolve_config(config)
    model, dataset, loss_fn = recipe.build(cfg)
    model.load_state_dict(params)
    with torch.no_grad():
        out = loss_fn(model, dataset.__getitems__(list(range(len(dataset)))))
    return float(out["loss"] if isinstance(out, dict) else out)


def test_micro_batches_96_and_160_give_the_parameters_of_one_process_with_256(launch_factory):
    cfg = tiny_mlp(global_batch_size=256, max_steps=20, checkpoint_every=100)
    one = launch_factory("mlp", cfg, ["cpu"], sub="one")
    assert one.run(timeout=300) == exitcodes.SUCCEEDED, one.err
    two = launch_factory("mlp", dict(cfg, parallel_mode="proportional", rank_shares=[96, 160]),
                         ["cpu", "cpu"], sub="two")
    assert two.run(timeout=300) == exitcodes.SUCCEEDED, two.err
    assert _max_diff(_params(one.dir, 20), _params(two.dir, 20)) < 1e-5
    steps = two.of_type("step")
    assert steps[0]["rank_shares"] == [96, 160]
    # The reported loss is the mean over the global batch, as one process reports it.
    assert steps[-1]["loss"] == pytest.approx(one.of_type("step")[-1]["loss"], rel=1e-4)


@pytest.mark.parametrize("mode", ["proportional", "independent"])
def test_a_resume_from_a_checkpoint_boundary_is_exact(launch_factory, mode):
    cfg = tiny_mlp(global_batch_size=48, max_steps=20, checkpoint_every=10, parallel_mode=mode, merge_every=4)
    whole = launch_factory("mlp", cfg, MIXED, sub="whole", ranks_on_cpu=True,
                           env={"GPUFLEET_TEST_RANK_SPEED": "2:0.25"})
    assert whole.run(timeout=300) == exitcodes.SUCCEEDED, whole.err
    state = ckpt.load_checkpoint(whole.dir / "ckpt" / "step-10")
    if mode == "proportional":
        shares = state["state"]["parallel"]["shares"]
        # Re-tuned at the boundary from the measured step times (rank 2 at a quarter speed), kept in the checkpoint.
        assert sum(shares) == 48 and shares[2] < min(shares[:2]), shares
    # A second run that starts from the first run's step-10 checkpoint.
    again = launch_factory("mlp", cfg, MIXED, sub="again", ranks_on_cpu=True)
    shutil.copytree(whole.dir / "ckpt" / "step-10", again.dir / "ckpt" / "step-10")
    assert again.run(timeout=300) == exitcodes.SUCCEEDED, again.err
    assert again.of_type("resume")[0]["step"] == 10
    assert _max_diff(_params(whole.dir, 20), _params(again.dir, 20)) < 1e-6


def test_independent_groups_merged_every_10_steps_reach_the_loss_of_one_job_and_resume(launch_factory):
    cfg = tiny_mlp(hidden=[32, 32], synthetic_samples=4096, global_batch_size=64, max_steps=100,
                   log_every=20, checkpoint_every=50)
    one = launch_factory("mlp", cfg, ["cpu"], sub="one")
    assert one.run(timeout=300) == exitcodes.SUCCEEDED, one.err
    ind_cfg = dict(cfg, parallel_mode="independent", merge_every=10)
    ind = launch_factory("mlp", ind_cfg, ["cuda:0", "hip:0"], sub="ind", ranks_on_cpu=True)
    assert ind.run(timeout=300) == exitcodes.SUCCEEDED, ind.err
    (warning,) = ind.of_type("warning")
    assert "gloo" in warning["message"] and "merge_every" in warning["message"]
    # The same samples: 100 steps of 64 (each group 32 a step from its own shard).
    single, merged = _full_loss(cfg, _params(one.dir, 100)), _full_loss(cfg, _params(ind.dir, 100))
    assert abs(merged - single) <= 0.05 * single, (merged, single)
    # The merged checkpoint is an ordinary one: it loads and a training resumes from it.
    state = ckpt.load_checkpoint(ind.dir / "ckpt" / "step-100")
    assert state["state"]["samples_seen"] == 100 * 64
    more = launch_factory("mlp", dict(ind_cfg, max_steps=110), ["cuda:0", "hip:0"], sub="more", ranks_on_cpu=True)
    shutil.copytree(ind.dir / "ckpt" / "step-100", more.dir / "ckpt" / "step-100")
    assert more.run(timeout=300) == exitcodes.SUCCEEDED, more.err
    assert more.of_type("resume")[0]["step"] == 100 and more.of_type("end")[0]["step"] == 110
    alone = launch_factory("mlp", dict(cfg, max_steps=110), ["cpu"], sub="alone")
    shutil.copytree(ind.dir / "ckpt" / "step-100", alone.dir / "ckpt" / "step-100")
    assert alone.run(timeout=300) == exitcodes.SUCCEEDED, alone.err  # and on one device, as plain DDP's would
    assert alone.of_type("resume")[0]["step"] == 100


def test_each_rank_of_a_mixed_set_gets_its_backends_device_variable_and_gloo(launch_factory):
    cfg = tiny_mlp(global_batch_size=48, max_steps=4, checkpoint_every=4, log_every=2, precision="bf16")
    run = launch_factory("mlp", cfg, MIXED, ranks_on_cpu=True)
    assert run.run(timeout=300) == exitcodes.SUCCEEDED, run.err
    (layout,) = run.of_type("layout")
    visible = [r["visible"] for r in layout["per_rank"]]
    assert visible == [{"CUDA_VISIBLE_DEVICES": "0"}, {"HIP_VISIBLE_DEVICES": "0"}, {"ZE_AFFINITY_MASK": "0"}]
    assert {r["process_group"] for r in layout["per_rank"]} == {"gloo"}
    assert [r["precision"] for r in layout["per_rank"]] == ["bf16"] * 3  # the CPU ranks of a simulated fleet
    assert layout["parallel_mode"] == "equal" and layout["shares"] == [16, 16, 16]
    (warning,) = run.of_type("warning")
    assert warning["code"] == "mixed-vendors" and "through host memory" in warning["message"]


def test_a_rank_takes_fp16_where_its_gpu_has_no_bf16(monkeypatch):
    from gpufleet.engine.parallel import rank_precision

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert rank_precision("bf16", torch.device("cuda", 0)) == "fp16"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert rank_precision("bf16", torch.device("cuda", 0)) == "bf16"
    assert rank_precision("bf16", torch.device("cpu")) == "bf16"
    assert rank_precision("fp32", torch.device("cuda", 0)) == "fp32"


def test_the_launch_spec_gives_each_vendor_its_variable():
    from gpufleet.engine.spec import LaunchSpec

    spec = LaunchSpec(recipe="mlp", config={}, devices=["cuda:2", "hip:1", "xpu:0", "hip:0"],
                      checkpoint_dir="c", progress_file="p")
    assert spec.mixed_vendors and spec.process_group_backend == "gloo"
    assert spec.run_devices() == ["cuda:0", "cuda:0", "xpu:0", "cuda:0"]
    assert spec.rank_visible_env(0) == {"CUDA_VISIBLE_DEVICES": "2", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert spec.rank_visible_env(1) == {"HIP_VISIBLE_DEVICES": "1"}
    assert spec.rank_visible_env(2) == {"ZE_AFFINITY_MASK": "0"}
    assert spec.vendor_groups() == [0, 1, 2, 1] and spec.visible_devices_env() == {}
    one = LaunchSpec(recipe="mlp", config={}, devices=["hip:0", "hip:1"], checkpoint_dir="c", progress_file="p")
    assert not one.mixed_vendors and one.process_group_backend is None and one.rank_visible_env(0) == {}
