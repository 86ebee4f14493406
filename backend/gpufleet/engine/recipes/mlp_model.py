"""The MLP module, its loss and its dataset."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from gpufleet.engine.data import ArrayDataset, BadDataError, load_arrays, pick_array, resolve_data_path

_ACT = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh}


class MLP(nn.Module):
    def __init__(self, in_features: int, hidden: list[int], out_features: int, activation: str = "relu"):
        super().__init__()
        layers: list[nn.Module] = []
        width = in_features
        for h in hidden:
            layers += [nn.Linear(width, h), _ACT[activation]()]
            width = h
        layers.append(nn.Linear(width, out_features))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def make_loss_fn(config):
    classification = config.task == "classification"

    def loss_fn(model: nn.Module, batch) -> dict[str, torch.Tensor]:
        x, y = batch
        out = model(x).float()
        if classification:
            ce = F.cross_entropy(out, y)
            acc = (out.argmax(-1) == y).float().mean()
            return {"loss": ce, "cross_entropy": ce.detach(), "accuracy": acc.detach()}
        mse = F.mse_loss(out, y.float())
        return {"loss": mse, "mse": mse.detach()}

    return loss_fn


def _synthetic(config) -> ArrayDataset:
    # A fixed random teacher makes a learnable, seeded task: every rank
    # generates the same rows.
    g = torch.Generator().manual_seed(config.seed + 7)
    n, d, o = config.synthetic_samples, config.in_features, config.out_features
    x = torch.randn(n, d, generator=g)
    w1 = torch.randn(d, 32, generator=g) / d**0.5
    w2 = torch.randn(32, o, generator=g) / 32**0.5
    logits = torch.tanh(x @ w1) @ w2
    if config.task == "classification":
        return ArrayDataset(x, logits.argmax(-1), dtypes=(torch.float32, torch.long))
    y = logits + config.synthetic_noise * torch.randn(n, o, generator=g)
    return ArrayDataset(x, y)


def make_dataset(config, data_root: str | Path | None) -> ArrayDataset:
    if config.data_path is None:
        return _synthetic(config)
    path = resolve_data_path(data_root, config.data_path)
    arrays = load_arrays(path)
    classification = config.task == "classification"
    ydtype = torch.long if classification else torch.float32
    if "" in arrays:  # one matrix: features then targets
        m = arrays[""]
        n_targets = 1 if classification else config.out_features
        if len(m.shape) != 2 or m.shape[1] != config.in_features + n_targets:
            raise BadDataError(
                f"{path.name} has shape {tuple(m.shape)}; expected (rows, in_features + targets = "
                f"{config.in_features + n_targets})"
            )
        x, y = m[:, : config.in_features], m[:, config.in_features:]
        if classification:
            y = y[:, 0]
    else:
        x = pick_array(arrays, config.x_key, path) if config.x_key in arrays else None
        y = arrays.get(config.y_key)
        if x is None or y is None:
            raise BadDataError(f"{path.name} must hold tensors {config.x_key!r} and {config.y_key!r}; "
                               f"it holds {sorted(arrays)}")
        if len(x.shape) != 2 or x.shape[1] != config.in_features:
            raise BadDataError(f"{config.x_key!r} has shape {tuple(x.shape)}; expected (rows, {config.in_features})")
    if not classification:
        if len(y.shape) == 1:
            y = y.reshape(-1, 1)
        if y.shape[1] != config.out_features:
            raise BadDataError(f"targets have {y.shape[1]} columns; out_features is {config.out_features}")
    else:
        lo, hi = float(y.min()), float(y.max())
        if lo < 0 or hi >= config.out_features:
            raise BadDataError(f"class labels must be in 0..{config.out_features - 1}; found {lo:g}..{hi:g}")
    return ArrayDataset(x, y, dtypes=(torch.float32, ydtype))
