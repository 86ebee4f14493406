"""Section ``code``: members' own code — its size limits, what a script may set, which interpreters and
environments it runs in, whose account and sandbox, and how a lab's network reaches its packages.

The network part: which of the worker's environment variables reach a training and its environment build
(``gpufleet.trainings.environment``: a proxy, a certificate authority, a package index are passed by
default), the certificate bundle trainings and ``uv`` trust, and how ``uv`` finds packages beyond
``GPUFLEET_ENV_INDEX_URL``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, field_validator

_PATTERN = re.compile(r"^[A-Za-z_*?\[\]!0-9]{1,128}$")


class CodeSettings(BaseModel):
    # Users' own code (script trainings, gpufleet.trainings): the upload, unpacked, and its files.
    code_max_bytes: int = Field(default=100 * 1024 * 1024, ge=1024, le=4 * 1024**3)
    code_max_unpacked_bytes: int = Field(default=1024**3, ge=1024, le=64 * 1024**3)
    code_max_files: int = Field(default=20000, ge=1, le=1_000_000)
    # Environment variables a script request may set (fnmatch patterns).
    script_env_allow: list[str] = Field(default_factory=lambda: [
        "OMP_NUM_THREADS", "MKL_NUM_THREADS", "TOKENIZERS_PARALLELISM", "PYTHONHASHSEED",
        "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "TORCH_DISTRIBUTED_DEBUG", "TORCH_SHOW_CPP_STACKTRACES",
        "HF_*", "WANDB_*", "TRAIN_*",
    ])
    # Other interpreters a script may choose by name: {"py312": "/opt/venvs/py312/bin/python"}.
    pythons: dict[str, str] = Field(default_factory=dict)
    # A training's own packages (gpufleet.trainings.venv): the cache of environments on each host (default
    # <data_dir>/envs) and its size budget.
    env_cache_dir: Path | None = None
    env_cache_max_bytes: int = Field(default=50 * 1024**3, ge=0)
    # Who a member's training runs as, and where (gpufleet.users.runas, gpufleet.jobs.isolation).
    run_account: str = Field(default="gpufleet-run", min_length=1, max_length=32)
    sandbox: Literal["auto", "bwrap", "off"] = "auto"
    shared_account_runs: bool = False

    # Where uv finds a training's packages: an index (default PyPI), wheel folders, or no index at all.
    env_index_url: str | None = None
    env_find_links: list[str] = Field(default_factory=list)
    env_no_index: bool = False
    # Environment names (fnmatch patterns, e.g. "WANDB_*") a training and its build get besides the
    # standard ones, and names they never get (the standard proxy and index names included).
    training_env_pass: list[str] = Field(default_factory=list, max_length=256)
    training_env_block: list[str] = Field(default_factory=list, max_length=256)
    # A PEM bundle of the authorities HTTPS is checked against (the lab's own with the public ones):
    # set as SSL_CERT_FILE, REQUESTS_CA_BUNDLE and CURL_CA_BUNDLE for builds and trainings.
    ca_bundle: Path | None = None
    # uv trusts the system's certificate store instead of its own (uv's --native-tls / --system-certs).
    env_native_tls: bool = False
    # Indexes uv searches after GPUFLEET_ENV_INDEX_URL (or PyPI), like pip's --extra-index-url.
    env_extra_index_urls: list[str] = Field(default_factory=list, max_length=32)

    @field_validator("training_env_pass", "training_env_block")
    @classmethod
    def _names(cls, v: list[str]) -> list[str]:
        bad = [p for p in v if not _PATTERN.match(p)]
        if bad:
            raise ValueError(f"{bad[0]!r} is not an environment name or pattern (letters, digits, _ and * ? [ ])")
        return v

    @field_validator("ca_bundle", mode="before")
    @classmethod
    def _unset(cls, v: object) -> object:
        return None if v == "" else v  # GPUFLEET_CA_BUNDLE= (empty): none

    @field_validator("ca_bundle")
    @classmethod
    def _absolute(cls, v: Path | None) -> Path | None:
        if v is not None and not v.is_absolute():
            raise ValueError("must be an absolute path (each host reads it from its own disk)")
        return v

    @field_validator("env_extra_index_urls")
    @classmethod
    def _urls(cls, v: list[str]) -> list[str]:
        bad = [u for u in v if not u.startswith(("http://", "https://", "file://"))]
        if bad:
            raise ValueError(f"{bad[0]!r} is not an index URL (http://, https:// or file://)")
        return v
