"""The YAML file named by ``GPUFLEET_CONFIG``, as a source of settings (its ``gpu:`` block and any top-level
setting)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from gpufleet import yamltext
from gpufleet.secretfiles import ConfigError


class YamlSource(PydanticBaseSettingsSource):
    """Reads the YAML file named by GPUFLEET_CONFIG (if any)."""

    def __init__(self, settings_cls: type[BaseSettings]):
        super().__init__(settings_cls)
        path = os.environ.get("GPUFLEET_CONFIG")
        self._data: dict[str, Any] = {}
        if path:
            p = Path(path)
            if not p.is_file():
                raise ConfigError(f"GPUFLEET_CONFIG: file {p} does not exist")
            try:
                data = yamltext.load(p.read_text()) or {}
            except yaml.YAMLError as exc:
                raise ConfigError(f"GPUFLEET_CONFIG: {p} is not valid YAML: {exc}") from exc
            if not isinstance(data, dict):
                raise ConfigError(f"GPUFLEET_CONFIG: {p} must hold a mapping at the top level")
            self._data = data

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return self._data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._data)
