"""The environment a training process gets: an allow-list, never the server's.

A training runs code the server did not write (a plugin recipe, a user's own
script), so it must not find ``GPUFLEET_SECRET_KEY`` (which signs every
session), the database URL with its password, or the broker's URL in its
environment. It gets what a Python program, torch and the GPU runtimes need,
and nothing else; a variable that is not on the list is dropped, so a secret
added to the worker's environment later stays out by default.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# Exact names passed through.
ALLOWED_NAMES = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM",
    "TMPDIR", "TEMP", "TMP", "PWD",
    "PYTHONPATH", "PYTHONHASHSEED", "PYTHONDONTWRITEBYTECODE", "PYTHONWARNINGS", "VIRTUAL_ENV",
    "LD_LIBRARY_PATH", "LD_PRELOAD",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
    "XDG_CACHE_HOME",
    # The fault drill (docs/architecture.md): a deployment's check of its failure handling.
    "GPUFLEET_TRAIN_FAULT", "GPUFLEET_TRAIN_HOLD",
})

# Prefixes passed through: locale, the GPU runtimes, collectives and torch's own knobs.
ALLOWED_PREFIXES = (
    "LC_",
    "CUDA_", "NVIDIA_", "NCCL_", "CUBLAS_", "CUDNN_",
    "HIP_", "ROCM_", "ROCR_", "HSA_", "AMD_",
    "ZE_", "ONEAPI_", "SYCL_", "CCL_", "I_MPI_",
    "TORCH_", "PYTORCH_", "TORCHINDUCTOR_", "TRITON_",
    "KMP_", "GLOO_",
)

# Never passed, even when a prefix above matches: credentials have no place in a training.
_NEVER = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "API_KEY", "PRIVATE_KEY")


def allowed(name: str) -> bool:
    if any(word in name.upper() for word in _NEVER):
        return False
    return name in ALLOWED_NAMES or name.startswith(ALLOWED_PREFIXES)


def training_environment(base: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """The allowed part of ``base`` (this process's environment by default), plus ``extra``."""
    source = os.environ if base is None else base
    env = {k: v for k, v in source.items() if allowed(k)}
    env.update(extra)
    return env
