"""The settings of a lab's network, a part of :class:`gpufleet.config.Settings`.

Which of the worker's environment variables reach a training and its
environment build (``gpufleet.trainings.environment``: a proxy, a certificate
authority, a package index are passed by default), the certificate bundle
trainings and ``uv`` trust, and how ``uv`` finds packages beyond
``GPUFLEET_ENV_INDEX_URL``. Kept beside ``config.py`` so that file stays
readable; ``Settings`` inherits these fields.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, Field, field_validator

_PATTERN = re.compile(r"^[A-Za-z_*?\[\]!0-9]{1,128}$")


class NetworkSettings(BaseModel):
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
