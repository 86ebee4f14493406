"""The environment a training process gets: an allow-list, never the server's.

A training runs code the server did not write (a plugin recipe, a user's own
script), so it must not find ``GPUFLEET_SECRET_KEY`` (which signs every
session), the database URL with its password, or the broker's URL in its
environment. It gets what a Python program, torch and the GPU runtimes need,
and what a lab's network needs (its proxy, its certificate authority, its
package index: both ``uv``'s environment build and a script's own downloads go
through them), and nothing else; a variable that is not on the list is dropped,
so a secret added to the worker's environment later stays out by default.

An admin adds names (``GPUFLEET_TRAINING_ENV_PASS``) or removes them, standard
ones included (``GPUFLEET_TRAINING_ENV_BLOCK``), and may name the certificate
bundle trainings trust (``GPUFLEET_CA_BUNDLE``): :class:`EnvPolicy`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpufleet.config import CodeSettings

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

# A lab's network: the certificate authorities HTTPS is checked against, the proxy, the package index.
NETWORK_NAMES = frozenset({
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
    "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy", "no_proxy",
    "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_TRUSTED_HOST", "PIP_CERT", "PIP_NO_INDEX",
})

# Prefixes passed through: locale, the GPU runtimes, collectives, torch's own knobs, and uv's settings.
ALLOWED_PREFIXES = (
    "LC_",
    "CUDA_", "NVIDIA_", "NCCL_", "CUBLAS_", "CUDNN_",
    "HIP_", "ROCM_", "ROCR_", "HSA_", "AMD_",
    "ZE_", "ONEAPI_", "SYCL_", "CCL_", "I_MPI_",
    "TORCH_", "PYTORCH_", "TORCHINDUCTOR_", "TRITON_",
    "KMP_", "GLOO_",
    "UV_",
)

# Never passed, even when a prefix above matches: credentials have no place in a training
# (unless an admin names them in GPUFLEET_TRAINING_ENV_PASS: an index's password for uv, say).
_NEVER = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "API_KEY", "PRIVATE_KEY")
# The server's own settings never pass, whatever an admin adds (but the fault drill's, above).
_SERVER = "GPUFLEET_"
# What GPUFLEET_CA_BUNDLE sets: the names Python's ssl, requests, curl and uv read a bundle from.
CA_BUNDLE_NAMES = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")


@dataclass(frozen=True)
class EnvPolicy:
    """An admin's changes to the allow-list, and the certificate bundle trainings trust."""

    passed: tuple[str, ...] = ()  # fnmatch patterns added
    blocked: tuple[str, ...] = ()  # fnmatch patterns removed; they win over every other rule
    ca_bundle: str | None = None

    @classmethod
    def of(cls, settings: CodeSettings) -> EnvPolicy:
        return cls(passed=tuple(settings.training_env_pass), blocked=tuple(settings.training_env_block),
                   ca_bundle=str(settings.ca_bundle) if settings.ca_bundle else None)


DEFAULT_POLICY = EnvPolicy()


def allowed(name: str, policy: EnvPolicy = DEFAULT_POLICY) -> bool:
    if any(fnmatchcase(name, p) for p in policy.blocked):
        return False
    if name in ALLOWED_NAMES:
        return True
    if name.startswith(_SERVER):
        return False
    if any(fnmatchcase(name, p) for p in policy.passed):
        return True
    if any(word in name.upper() for word in _NEVER):
        return False
    return name in NETWORK_NAMES or name.startswith(ALLOWED_PREFIXES)


def training_environment(base: Mapping[str, str] | None = None, policy: EnvPolicy = DEFAULT_POLICY,
                         **extra: str) -> dict[str, str]:
    """The allowed part of ``base`` (this process's environment by default), the policy's CA bundle, ``extra``."""
    source = os.environ if base is None else base
    env = {k: v for k, v in source.items() if allowed(k, policy)}
    if policy.ca_bundle:
        env.update({name: policy.ca_bundle for name in CA_BUNDLE_NAMES if allowed(name, policy)})
    env.update(extra)
    return env
