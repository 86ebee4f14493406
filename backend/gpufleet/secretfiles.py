"""Secrets given as files: ``GPUFLEET_<NAME>_FILE``, or systemd's credentials.

A value in a process's environment can be read by anything that can read
``/proc/<pid>/environ`` of that process, and is inherited by every child it
starts. The server's secret and the database and Redis URLs (which carry
passwords) can therefore be given as files instead:

- ``GPUFLEET_SECRET_KEY_FILE``, ``GPUFLEET_DATABASE_URL_FILE``,
  ``GPUFLEET_REDIS_URL_FILE``: a path to a file holding the value (one line;
  surrounding whitespace is dropped);
- systemd's ``LoadCredential=secret_key:/etc/gpufleet/secret_key`` (and
  ``database_url``, ``redis_url``): read from ``$CREDENTIALS_DIRECTORY``.

Giving one value both directly and as a file is an error.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic_settings import PydanticBaseSettingsSource

SECRET_SETTINGS = ("secret_key", "database_url", "redis_url")


class ConfigError(Exception):
    """A setting is missing or invalid; the message names it and says what to fix (``gpufleet.config``'s error)."""


def file_for(name: str, environ: Mapping[str, str] | None = None) -> tuple[str, Path] | None:
    """(where it was named, the file) for setting ``name``, or None."""
    env = os.environ if environ is None else environ
    var = f"GPUFLEET_{name.upper()}_FILE"
    if env.get(var):
        return var, Path(env[var])
    creds = env.get("CREDENTIALS_DIRECTORY")
    if creds and (Path(creds) / name).is_file():
        return "$CREDENTIALS_DIRECTORY", Path(creds) / name
    return None


def read_secret_files(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The secret settings given as files, read now."""
    env = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for name in SECRET_SETTINGS:
        found = file_for(name, env)
        if found is None:
            continue
        where, path = found
        if env.get(f"GPUFLEET_{name.upper()}"):
            raise ConfigError(f"GPUFLEET_{name.upper()} is set and also given as a file by {where}; "
                                  "keep only the file")
        try:
            out[name] = path.read_text().strip()
        except OSError as exc:
            raise ConfigError(f"{where}: cannot read {path}: {exc.strerror}") from None
        if not out[name]:
            raise ConfigError(f"{where}: {path} is empty")
    return out


def scrub_environment() -> list[str]:
    """Drop the secret values from this process's environment, so no child inherits them.

    The settings already hold them. (``/proc/self/environ`` keeps showing the
    block this process started with; only another uid, or a PID namespace,
    keeps that from a training: ``gpufleet.jobs.isolation``.)
    """
    dropped = []
    for name in SECRET_SETTINGS:
        key = f"GPUFLEET_{name.upper()}"
        if os.environ.pop(key, None) is not None:
            dropped.append(key)
    return dropped


class SecretFilesSource(PydanticBaseSettingsSource):
    """The settings source of the secrets given as files (below the environment, above the YAML file)."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        return read_secret_files()
