"""Datasets: arrays from files under the data root, and synthetic generators.

Every dataset here is map-style and answers ``__getitems__(indices)`` with a
whole batch, so the DataLoader fetches one slice per micro-batch instead of
collating samples one by one (see ``distributed.create_distributed_dataloader``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from gpufleet.engine.config import TrainingConfigError
from gpufleet.engine.paths import DataPathError, resolve_data_path

__all__ = [
    "BadDataError",
    "DataPathError",
    "ArrayDataset",
    "SyntheticSparseActivations",
    "feature_recovery",
    "load_arrays",
    "resolve_data_path",
]


class BadDataError(TrainingConfigError):
    """The data file exists but cannot be trained on (shape, dtype, content)."""

    def __init__(self, message: str):
        super().__init__("data_path", message)


def load_arrays(path: Path) -> dict[str, Any]:
    """Open a data file without copying it into memory where the format allows.

    ``.npy`` is memory-mapped; ``.safetensors`` and ``.pt`` give their named
    tensors (``.pt`` with ``weights_only=True``, so a file cannot run code).
    """
    try:
        if path.suffix == ".npy":
            return {"": np.load(path, mmap_mode="r", allow_pickle=False)}
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            return dict(load_file(str(path)))
        if path.suffix == ".pt":
            obj = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            if isinstance(obj, torch.Tensor):
                return {"": obj}
            if isinstance(obj, dict) and all(isinstance(v, torch.Tensor) for v in obj.values()):
                return dict(obj)
            raise BadDataError(f"{path.name} must hold a tensor or a dict of tensors")
    except BadDataError:
        raise
    except Exception as exc:  # noqa: BLE001 - a corrupt or foreign file: say which and why
        raise BadDataError(f"cannot read {path.name}: {exc}") from None
    raise BadDataError(f"{path.name}: unsupported file type")


def pick_array(arrays: dict[str, Any], key: str | None, path: Path) -> Any:
    if "" in arrays:
        return arrays[""]
    if key and key in arrays:
        return arrays[key]
    if len(arrays) == 1:
        return next(iter(arrays.values()))
    raise BadDataError(f"{path.name} holds {sorted(arrays)}; say which with the key field (got {key!r})")


class ArrayDataset:
    """Rows of one or more arrays that share their first dimension."""

    def __init__(self, *arrays: Any, dtypes: tuple[torch.dtype, ...] | None = None):
        if not arrays:
            raise BadDataError("no arrays")
        n = len(arrays[0])
        for a in arrays:
            if len(a) != n:
                raise BadDataError(f"arrays differ in length: {[len(x) for x in arrays]}")
        if n == 0:
            raise BadDataError("the data has no rows")
        self.arrays = arrays
        self.dtypes = dtypes or tuple(torch.float32 for _ in arrays)

    def __len__(self) -> int:
        return len(self.arrays[0])

    def _take(self, a: Any, idx: Any, dtype: torch.dtype) -> torch.Tensor:
        if isinstance(a, torch.Tensor):
            return a.index_select(0, torch.as_tensor(idx)).to(dtype)
        # Fancy indexing on a memmap copies only the rows asked for.
        return torch.from_numpy(np.ascontiguousarray(a[np.asarray(idx)])).to(dtype)

    def __getitems__(self, idx: Any):
        out = tuple(self._take(a, idx, d) for a, d in zip(self.arrays, self.dtypes))
        return out[0] if len(out) == 1 else out

    def __getitem__(self, i: int):
        out = self.__getitems__([i])
        return out[0] if isinstance(out, torch.Tensor) else tuple(t[0] for t in out)


class SyntheticSparseActivations:
    """Activations built from a known sparse dictionary.

    ``n_features`` unit-norm directions in ``d_in`` dimensions; each sample
    turns each feature on with probability ``mean_active / n_features`` and a
    magnitude in [0.5, 1.5], so a sample is a sparse sum of true features.
    Because the dictionary is known, a trained SAE can be scored by how many
    true features its decoder recovered (:func:`feature_recovery`).

    Everything derives from ``seed``: every rank builds the same data. The
    arrays are generated on first use, so building the recipe stays cheap.
    The generators are offset from ``seed`` so the true features never equal
    a model's initial weights drawn from ``torch.manual_seed(seed)``.
    """

    _FEATURE_STREAM = 0x5AE_0001
    _SAMPLE_STREAM = 0x5AE_0002

    def __init__(self, d_in: int, n_features: int, n_samples: int, mean_active: float,
                 noise: float = 0.0, seed: int = 0):
        self.d_in, self.n_features, self.n_samples = d_in, n_features, n_samples
        self.mean_active, self.noise, self.seed = mean_active, noise, seed
        self._features: torch.Tensor | None = None
        self._data: torch.Tensor | None = None

    @property
    def features(self) -> torch.Tensor:
        if self._features is None:
            g = torch.Generator().manual_seed(self.seed + self._FEATURE_STREAM)
            f = torch.randn(self.n_features, self.d_in, generator=g)
            self._features = f / f.norm(dim=1, keepdim=True)
        return self._features

    @property
    def data(self) -> torch.Tensor:
        if self._data is None:
            g = torch.Generator().manual_seed(self.seed + self._SAMPLE_STREAM)
            p = min(1.0, self.mean_active / self.n_features)
            chunks = []
            # In chunks, so the dense (samples x features) mask stays small.
            for start in range(0, self.n_samples, 8192):
                n = min(8192, self.n_samples - start)
                on = torch.rand(n, self.n_features, generator=g) < p
                mag = 0.5 + torch.rand(n, self.n_features, generator=g)
                x = (on * mag) @ self.features
                if self.noise:
                    x += self.noise * torch.randn(n, self.d_in, generator=g)
                chunks.append(x)
            self._data = torch.cat(chunks)
        return self._data

    def __len__(self) -> int:
        return self.n_samples

    def __getitems__(self, idx: Any) -> torch.Tensor:
        return self.data.index_select(0, torch.as_tensor(idx))

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.data[i]


def feature_recovery(decoder: torch.Tensor, true_features: torch.Tensor, threshold: float = 0.9) -> float:
    """Fraction of true features that some learned decoder direction matches
    with cosine similarity above ``threshold``. Both are (n, d_in) row sets."""
    d = decoder.detach().float().cpu()
    t = true_features.detach().float().cpu()
    d = d / d.norm(dim=1, keepdim=True).clamp_min(1e-12)
    t = t / t.norm(dim=1, keepdim=True).clamp_min(1e-12)
    best = (t @ d.T).max(dim=1).values
    return float((best > threshold).float().mean())
