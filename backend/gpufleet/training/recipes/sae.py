"""The ``sae`` recipe: a sparse autoencoder over activation vectors.

Two variants: ``relu`` (ReLU codes with an L1 penalty) and ``topk`` (the k
largest pre-activations, with the AuxK loss that revives dead latents). Both
keep decoder directions at unit norm after every optimizer step.

Config and registration only; the torch model is in ``sae_model`` and is
imported when the recipe is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from gpufleet.training.config import Problems, TrainConfig, option
from gpufleet.training.recipes import Recipe


@dataclass
class SAEConfig(TrainConfig):
    d_in: int = option(64, "width of the activation vectors to encode")
    n_latents: int = option(512, "dictionary size: latent features the autoencoder learns")
    variant: Literal["relu", "topk"] = option(
        "topk", "topk keeps the k largest latents; relu uses ReLU codes with an L1 penalty")
    k: int = option(8, "topk: latents kept per sample")
    # Its scale matches the per-sample summed squared error; on the synthetic
    # data (|x|^2 ~ 4) 0.3 gives ~15 active latents and recovers every
    # feature, 1e-3 stays dense.
    l1_coeff: float = option(0.3, "relu: weight of the L1 sparsity penalty on the codes")
    aux_coeff: float = option(1 / 32, "topk: weight of the AuxK loss that revives dead latents; 0 turns it off")
    aux_k: int = option(32, "topk: dead latents the AuxK loss may use")
    dead_steps: int = option(100, "optimizer steps without firing after which a latent counts as dead")
    data_key: str = option("activations", "name of the activations tensor in a .safetensors / .pt file")
    synthetic_features: int = option(256, "true features behind the synthetic data (used when data_path is empty)")
    synthetic_samples: int = option(32768, "samples of synthetic data")
    synthetic_active: float = option(4.0, "average true features active per synthetic sample")
    synthetic_noise: float = option(0.0, "noise added to the synthetic activations")

    def check(self, p: Problems) -> None:
        super().check(p)
        p.positive(self, "d_in", "n_latents", "k", "aux_k", "dead_steps",
                   "synthetic_features", "synthetic_samples")
        p.choice(self, "variant", ("relu", "topk"))
        if self.k > self.n_latents:
            p.add("k", f"must be <= n_latents ({self.n_latents}), got {self.k}")
        if self.aux_k > self.n_latents:
            p.add("aux_k", f"must be <= n_latents ({self.n_latents}), got {self.aux_k}")
        for name in ("l1_coeff", "aux_coeff", "synthetic_noise"):
            if getattr(self, name) < 0:
                p.add(name, f"must be >= 0, got {getattr(self, name)}")
        if not 0 < self.synthetic_active <= self.synthetic_features:
            p.add("synthetic_active", f"must be > 0 and <= synthetic_features ({self.synthetic_features}), "
                  f"got {self.synthetic_active}")


def _build_model(config: SAEConfig):
    from gpufleet.training.recipes.sae_model import SparseAutoencoder

    return SparseAutoencoder(config.d_in, config.n_latents, config.variant, k=config.k,
                             aux_k=config.aux_k, dead_steps=config.dead_steps,
                             use_aux=config.variant == "topk" and config.aux_coeff > 0)


def _build(config: SAEConfig, data_root: str | Path | None):
    from gpufleet.training.recipes.sae_model import make_dataset, make_loss_fn

    return _build_model(config), make_dataset(config, data_root), make_loss_fn(config)


def _evaluate(model, dataset, config: SAEConfig) -> dict[str, float]:
    from gpufleet.training.recipes.sae_model import evaluate

    return evaluate(model, dataset, config)


RECIPE = Recipe(
    name="sae",
    config_cls=SAEConfig,
    build_fn=_build,
    build_model_fn=_build_model,
    loss_parts=("reconstruction", "sparsity", "auxiliary"),
    description="sparse autoencoder over activation vectors (ReLU+L1 or TopK)",
    evaluate_fn=_evaluate,
)
