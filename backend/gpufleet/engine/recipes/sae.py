"""The ``sae`` recipe: a sparse autoencoder over activation vectors.

Two variants: ``relu`` (ReLU codes with an L1 penalty) and ``topk`` (the k
largest pre-activations, with the AuxK loss that revives dead latents). Both
keep decoder directions at unit norm after every optimizer step.

Config and registration only; the torch model is in ``sae_model`` and is
imported when the recipe is built.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from gpufleet.bounds import MAX_COEFF
from gpufleet.engine.config import PositiveInt, Problems, TrainConfig, option
from gpufleet.engine.recipes import Recipe


class SAEConfig(TrainConfig):
    d_in: PositiveInt = option(64, "width of the activation vectors to encode")
    n_latents: PositiveInt = option(512, "dictionary size: latent features the autoencoder learns")
    variant: Literal["relu", "topk"] = option(
        "topk", "topk keeps the k largest latents; relu uses ReLU codes with an L1 penalty")
    k: PositiveInt = option(8, "topk: latents kept per sample")
    # Its scale matches the per-sample summed squared error; on the synthetic
    # data (|x|^2 ~ 4) 0.3 gives ~15 active latents and recovers every
    # feature, 1e-3 stays dense.
    l1_coeff: float = option(0.3, "relu: weight of the L1 sparsity penalty on the codes", ge=0,
                              le=MAX_COEFF)
    aux_coeff: float = option(1 / 32, "topk: weight of the AuxK loss that revives dead latents; 0 turns it off",
                              ge=0, le=MAX_COEFF)
    aux_k: PositiveInt = option(32, "topk: dead latents the AuxK loss may use")
    dead_steps: PositiveInt = option(100, "optimizer steps without firing after which a latent counts as dead")
    data_key: str = option("activations", "name of the activations tensor in a .safetensors / .pt file")
    synthetic_features: PositiveInt = option(
        256, "true features behind the synthetic data (used when data_path is empty)")
    synthetic_samples: PositiveInt = option(32768, "samples of synthetic data")
    synthetic_active: float = option(4.0, "average true features active per synthetic sample", gt=0,
                                      le=MAX_COEFF)
    synthetic_noise: float = option(0.0, "noise added to the synthetic activations", ge=0,
                                     le=MAX_COEFF)

    def check(self, p: Problems) -> None:
        super().check(p)
        if self.k > self.n_latents:
            p.add("k", f"must be <= n_latents ({self.n_latents}), got {self.k}")
        if self.aux_k > self.n_latents:
            p.add("aux_k", f"must be <= n_latents ({self.n_latents}), got {self.aux_k}")
        if self.synthetic_active > self.synthetic_features:
            p.add("synthetic_active", f"must be > 0 and <= synthetic_features ({self.synthetic_features}), "
                  f"got {self.synthetic_active}")


def _build_model(config: SAEConfig):
    from gpufleet.engine.recipes.sae_model import SparseAutoencoder

    return SparseAutoencoder(config.d_in, config.n_latents, config.variant, k=config.k,
                             aux_k=config.aux_k, dead_steps=config.dead_steps,
                             use_aux=config.variant == "topk" and config.aux_coeff > 0)


def _build(config: SAEConfig, data_root: str | Path | None):
    from gpufleet.engine.recipes.sae_model import make_dataset, make_loss_fn

    return _build_model(config), make_dataset(config, data_root), make_loss_fn(config)


def _evaluate(model, dataset, config: SAEConfig) -> dict[str, float]:
    from gpufleet.engine.recipes.sae_model import evaluate

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
