"""Device operations, data loading and checkpoint files."""

from __future__ import annotations

import json
from collections import namedtuple
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from gpufleet.devices.ops import backend_ops, move_to_device
from gpufleet.engine import checkpoint as ckpt
from gpufleet.engine.data import BadDataError, SyntheticSparseActivations, feature_recovery
from gpufleet.engine.recipes import get_recipe


def test_move_to_device_walks_containers():
    P = namedtuple("P", "a b")
    moved = move_to_device({"x": np.ones(3), "y": [torch.ones(2), (1, "s", None)], "p": P(torch.zeros(1), 2)},
                           "cpu")
    assert isinstance(moved["x"], torch.Tensor) and moved["x"].shape == (3,)
    assert moved["y"][1] == (1, "s", None) and isinstance(moved["y"][0], torch.Tensor)
    assert isinstance(moved["p"], P) and moved["p"].b == 2


def test_cpu_backend_ops():
    ops = backend_ops("cpu")
    assert ops.dist_backend == "gloo" and not ops.is_accelerator
    assert ops.memory_info() is None
    assert ops.max_memory_allocated() > 0  # the process RSS peak
    with ops.autocast(torch.bfloat16):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    with ops.autocast(None):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32
    assert not ops.grad_scaler(False).is_enabled()
    assert backend_ops("hip:1").device == torch.device("cuda:1")


def test_data_files_load_and_bad_shapes_are_refused(tmp_path: Path):
    root = tmp_path
    acts = np.random.default_rng(0).standard_normal((100, 16)).astype(np.float32)
    np.save(root / "acts.npy", acts)
    save_file({"activations": torch.from_numpy(acts)}, str(root / "acts.safetensors"))
    torch.save({"activations": torch.from_numpy(acts)}, root / "acts.pt")
    sae = get_recipe("sae")
    for name in ("acts.npy", "acts.safetensors", "acts.pt"):
        cfg = sae.resolve_config({"d_in": 16, "n_latents": 32, "data_path": name})
        _, ds, _ = sae.build(cfg, root)
        assert len(ds) == 100
        assert torch.allclose(ds.__getitems__([3, 7]), torch.from_numpy(acts[[3, 7]]))
    _, ds, _ = sae.build(sae.resolve_config({"d_in": 16, "n_latents": 32, "data_path": "acts.npy"}), root)
    assert isinstance(ds.arrays[0], np.memmap)  # memory-mapped, not read into memory
    with pytest.raises(BadDataError, match="d_in=32"):
        sae.build(sae.resolve_config({"d_in": 32, "n_latents": 32, "data_path": "acts.npy"}), root)
    # A pickle that would run code is refused by weights_only loading.
    import pickle
    (root / "evil.pt").write_bytes(pickle.dumps(Path("/")))
    with pytest.raises(BadDataError, match="cannot read"):
        sae.build(sae.resolve_config({"d_in": 16, "data_path": "evil.pt"}), root)
    mlp = get_recipe("mlp")
    table = np.concatenate([acts[:, :8], np.arange(100)[:, None] % 3], axis=1)
    np.save(root / "table.npy", table)
    cfg = mlp.resolve_config({"in_features": 8, "out_features": 3, "task": "classification", "data_path": "table.npy"})
    _, ds, _ = mlp.build(cfg, root)
    x, y = ds.__getitems__([0, 4])
    assert x.shape == (2, 8) and y.tolist() == [0, 1] and y.dtype == torch.long
    bad = mlp.resolve_config({"in_features": 8, "out_features": 2, "task": "classification", "data_path": "table.npy"})
    with pytest.raises(BadDataError, match="class labels"):
        mlp.build(bad, root)


def test_synthetic_generator_and_recovery_metric():
    ds = SyntheticSparseActivations(d_in=16, n_features=32, n_samples=1000, mean_active=3, seed=1)
    again = SyntheticSparseActivations(d_in=16, n_features=32, n_samples=1000, mean_active=3, seed=1)
    assert torch.equal(ds.__getitems__([5, 6]), again.__getitems__([5, 6]))  # every rank agrees
    # About 3 features of magnitude U(0.5, 1.5) per sample: E|x|^2 = 3 * 13/12.
    energy = ds.data.pow(2).sum(1).mean()
    assert 2.6 < energy < 4.0
    assert feature_recovery(ds.features, ds.features) == 1.0
    assert feature_recovery(-ds.features, ds.features) == 0.0
    half = ds.features.clone()
    half[16:] = torch.randn(16, 16)
    assert feature_recovery(half, ds.features) == pytest.approx(0.5, abs=0.04)


def test_models_build_on_the_meta_device_for_estimates():
    for name in ("sae", "mlp"):
        r = get_recipe(name)
        with torch.device("meta"):
            model = r.build_model(r.resolve_config({}))
        assert all(p.is_meta for p in model.parameters())
        assert sum(p.numel() for p in model.parameters()) > 0


def test_checkpoints_are_atomic_and_pruned(tmp_path: Path):
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters())
    ms, os_ = ckpt.gather_state(model, opt)
    for step in (10, 20, 30, 40):
        ckpt.write_checkpoint(tmp_path, step, model_state=ms, optim_state=os_, train_state={"step": step},
                              meta={"config": {}}, keep=2)
    assert [s for s, _ in ckpt.list_checkpoints(tmp_path)] == [30, 40]
    # A folder without meta.json (a crash mid-write) never counts.
    (tmp_path / "step-50").mkdir()
    (tmp_path / "step-50" / "model.pt").write_bytes(b"partial")
    assert ckpt.newest_checkpoint(tmp_path) == tmp_path / "step-40"
    loaded = ckpt.load_checkpoint(tmp_path / "step-40")
    assert loaded["meta"]["step"] == 40 and set(loaded["model"]) == {"weight", "bias"}
    assert json.loads((tmp_path / "step-40" / "meta.json").read_text())["files"]
