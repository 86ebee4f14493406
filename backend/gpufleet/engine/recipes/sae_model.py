"""The sparse autoencoder module, its loss and its dataset."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from gpufleet.engine.data import (
    ArrayDataset,
    BadDataError,
    SyntheticSparseActivations,
    feature_recovery,
    load_arrays,
    pick_array,
    resolve_data_path,
)


class SparseAutoencoder(nn.Module):
    """x -> z (sparse codes) -> x_hat. ``forward`` returns ``(x_hat, z, aux)``.

    Decoder directions are the rows of ``W_dec`` (n_latents x d_in), so FSDP's
    dim-0 sharding keeps each direction whole on one rank and the unit-norm
    step needs no communication.
    """

    # Its only buffer (steps since each latent fired) is updated from an
    # all-reduced count in post_step, so DDP need not broadcast it every forward.
    ddp_sync_buffers = False

    def __init__(self, d_in: int, n_latents: int, variant: str = "topk", *, k: int = 8,
                 aux_k: int = 32, dead_steps: int = 100, use_aux: bool = True):
        super().__init__()
        self.d_in, self.n_latents, self.variant = d_in, n_latents, variant
        self.k, self.aux_k, self.dead_steps = k, aux_k, dead_steps
        self.use_aux = use_aux and variant == "topk"
        w = torch.randn(n_latents, d_in)
        w = w / w.norm(dim=1, keepdim=True)
        self.W_dec = nn.Parameter(w)
        # Encoder starts as the decoder's transpose: a standard SAE init that
        # makes early codes meaningful.
        self.W_enc = nn.Parameter(w.clone())
        self.b_enc = nn.Parameter(torch.zeros(n_latents))
        self.b_dec = nn.Parameter(torch.zeros(d_in))
        # Optimizer steps since each latent last fired, for AuxK's dead set.
        self.register_buffer("steps_since_fired", torch.zeros(n_latents, dtype=torch.long))
        # Which latents fired during the current optimizer step (all micro-batches).
        self.register_buffer("_fired", torch.zeros(n_latents, dtype=torch.bool), persistent=False)
        # Dead-latent count as a Python int, refreshed once per optimizer step,
        # so the forward pass needs no device-to-host sync to decide on AuxK.
        self._n_dead: int | None = None

    def _dead_count(self) -> int:
        if self._n_dead is None:
            self._n_dead = int((self.steps_since_fired >= self.dead_steps).sum())
        return self._n_dead

    def _load_from_state_dict(self, *args, **kwargs):
        self._n_dead = None  # the loaded counters decide it
        super()._load_from_state_dict(*args, **kwargs)

    def encode_pre(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.b_dec) @ self.W_enc.T + self.b_enc

    def forward(self, x: torch.Tensor):
        pre = self.encode_pre(x)
        aux: dict[str, torch.Tensor] = {}
        if self.variant == "relu":
            z = torch.relu(pre)
        else:
            vals, idx = pre.topk(self.k, dim=-1)
            z = torch.zeros_like(pre).scatter(-1, idx, torch.relu(vals))
            if self.use_aux and self.training and self._dead_count() > 0:
                dead = self.steps_since_fired >= self.dead_steps
                kk = min(self.aux_k, self._dead_count())
                masked = pre.masked_fill(~dead, float("-inf"))
                avals, aidx = masked.topk(kk, dim=-1)
                z_aux = torch.zeros_like(pre).scatter(-1, aidx, torch.relu(avals))
                aux["residual_hat"] = z_aux @ self.W_dec
        x_hat = z @ self.W_dec + self.b_dec
        if self.training:
            with torch.no_grad():
                self._fired |= (z > 0).any(dim=0)
        return x_hat, z, aux

    @torch.no_grad()
    def post_step(self) -> None:
        """Runs after every optimizer step, on every rank."""
        norms = self.W_dec.norm(dim=1, keepdim=True).clamp_min(1e-8)
        self.W_dec.div_(norms)
        if self.use_aux:
            fired = self._fired.to(torch.int32)
            # Dead means dead on the whole global batch, not on one rank's share,
            # so a run gives the same result on one device or many.
            if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
                dist.all_reduce(fired, op=dist.ReduceOp.MAX)
            self.steps_since_fired.add_(1).masked_fill_(fired.bool(), 0)
            self._n_dead = None
        self._fired.zero_()

    def decoder_directions(self) -> torch.Tensor:
        return self.W_dec


def sae_loss(x: torch.Tensor, x_hat: torch.Tensor, z: torch.Tensor, aux: dict[str, torch.Tensor], *,
             variant: str, l1_coeff: float, aux_coeff: float) -> dict[str, torch.Tensor]:
    # Per-sample sums averaged over the batch: averaging over ranks then gives
    # exactly the average over the global batch.
    x = x.float()
    x_hat = x_hat.float()
    recon = (x_hat - x).pow(2).sum(-1).mean()
    zero = recon.new_zeros(())
    sparsity = l1_coeff * z.float().abs().sum(-1).mean() if variant == "relu" else zero
    if "residual_hat" in aux:
        residual = (x - x_hat).detach()
        auxiliary = aux_coeff * (aux["residual_hat"].float() - residual).pow(2).sum(-1).mean()
    else:
        auxiliary = zero
    loss = recon + sparsity + auxiliary
    return {"loss": loss, "reconstruction": recon.detach(), "sparsity": sparsity.detach(),
            "auxiliary": auxiliary.detach()}


def make_loss_fn(config):
    variant, l1, auxc = config.variant, config.l1_coeff, config.aux_coeff

    def loss_fn(model: nn.Module, batch: torch.Tensor) -> dict[str, torch.Tensor]:
        x_hat, z, aux = model(batch)
        return sae_loss(batch, x_hat, z, aux, variant=variant, l1_coeff=l1, aux_coeff=auxc)

    return loss_fn


def make_dataset(config, data_root: str | Path | None):
    if config.data_path is None:
        return SyntheticSparseActivations(config.d_in, config.synthetic_features, config.synthetic_samples,
                                          config.synthetic_active, config.synthetic_noise, seed=config.seed)
    path = resolve_data_path(data_root, config.data_path)
    arr = pick_array(load_arrays(path), config.data_key, path)
    if len(arr.shape) != 2 or arr.shape[1] != config.d_in:
        raise BadDataError(f"{path.name} has shape {tuple(arr.shape)}; the SAE needs (samples, d_in={config.d_in})")
    return ArrayDataset(arr)


def evaluate(model: nn.Module, dataset: Any, config) -> dict[str, float]:
    out: dict[str, float] = {}
    if isinstance(dataset, SyntheticSparseActivations):
        out["feature_recovery"] = feature_recovery(model.W_dec, dataset.features, 0.9)
    return out
