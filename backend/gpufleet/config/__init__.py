"""The settings of every gpufleet process: one object, in sections per component.

Values come, lowest to highest priority, from defaults, the optional YAML file
named by ``GPUFLEET_CONFIG`` (its ``gpu:`` block and any top-level setting),
secret files, and ``GPUFLEET_*`` environment variables. Invalid values fail at
start with a message naming the setting (see :func:`load_settings`).

Each section is a class of its own module here (``StoreSettings`` in
``store.py``, ``ApiSettings`` in ``api.py``, …) and :class:`Settings` is all of
them at once, so a variable keeps its one flat name (``GPUFLEET_RETENTION_DAYS``)
and the environment is read and checked once per process. A package is given
its sections: its functions take ``settings: TelemetrySettings`` (one parameter
per section where they read several), and :data:`READS` lists the sections each
package may be given; ``tests/test_settings_sections.py`` reads every function's
annotations and holds each package to that list, with the whole ``Settings``
only in the processes' assemblers (:data:`ASSEMBLERS`) and entry points.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from pydantic import ValidationError, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from gpufleet.config.checkpoints import CheckpointStoreSettings
from gpufleet.config.api import DEFAULT_SECRET, LOOPBACK_HOSTS, ApiSettings, is_loopback_address
from gpufleet.config.code import CodeSettings
from gpufleet.config.host import GPUConfig, HostSettings, NVLinkConfig, parse_simulate_spec
from gpufleet.config.scheduler import SchedulerSettings
from gpufleet.config.sessions import SessionSettings
from gpufleet.config.store import StoreSettings
from gpufleet.config.telemetry import TelemetrySettings
from gpufleet.config.webhooks import WebhookSettings
from gpufleet.config.worker import WorkerSettings

# ConfigError is defined beside the secrets' source, which raises it too; it is this module's error.
from gpufleet.secretfiles import ConfigError, SecretFilesSource
from gpufleet.yamlsource import YamlSource

__all__ = [
    "ASSEMBLERS", "DEFAULT_SECRET", "LOOPBACK_HOSTS", "READS", "SECTIONS", "ApiSettings", "CheckpointStoreSettings",
    "CodeSettings", "ConfigError",
    "GPUConfig", "HostSettings", "NVLinkConfig", "SchedulerSettings", "SessionSettings", "Settings",
    "StoreSettings", "TelemetrySettings", "WebhookSettings", "WorkerSettings", "get_settings",
    "is_loopback_address", "load_settings", "parse_simulate_spec", "reset_settings_cache",
]

# The sections, by the name README.md's Configuration section groups the variables under.
SECTIONS: dict[str, type] = {
    "store": StoreSettings,
    "api": ApiSettings,
    "host": HostSettings,
    "scheduler": SchedulerSettings,
    "worker": WorkerSettings,
    "code": CodeSettings,
    "telemetry": TelemetrySettings,
    "webhooks": WebhookSettings,
    "sessions": SessionSettings,
    "checkpoints": CheckpointStoreSettings,
}

# The sections each package of gpufleet reads. The processes' assemblers (api, cli, commands) read them all;
# a package not listed reads no setting. A package that needs another section says so here, in review.
READS: dict[str, tuple[str, ...]] = {
    "datadir": ("store", "api"),
    "db": ("store",),
    "events": ("store",),
    "devices": ("host", "store"),
    "telemetry": ("telemetry", "host", "store", "code"),
    "notify": ("webhooks", "store"),
    "users": ("store",),
    "scheduling": ("scheduler", "telemetry", "host", "worker", "store"),
    "trainings": ("code", "worker", "scheduler", "store"),
    "interactive": ("sessions", "scheduler", "code", "store", "telemetry"),
    "pools": ("worker", "code", "store", "scheduler"),  # scheduler: the quotas its submitter holds work to
    "sweeps": ("store",),
    "bookings": ("scheduler", "store"),
    "ckptstore": ("checkpoints",),
    "jobs": ("worker", "code", "host", "sessions", "webhooks", "store", "checkpoints"),
}
ASSEMBLERS = ("api", "cli", "commands")


class Settings(StoreSettings, ApiSettings, HostSettings, SchedulerSettings, WorkerSettings, CodeSettings,
               TelemetrySettings, WebhookSettings, SessionSettings, CheckpointStoreSettings, BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="GPUFLEET_",
        env_nested_delimiter="__",
        extra="forbid",
    )

    @model_validator(mode="after")
    def _fill_paths(self) -> Settings:
        self.data_dir = self.data_dir.expanduser()
        if self.data_root is None:
            self.data_root = self.data_dir / "data"
        if self.checkpoint_root is None:
            self.checkpoint_root = self.data_dir / "checkpoints"
        if self.env_cache_dir is None:
            self.env_cache_dir = self.data_dir / "envs"
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, SecretFilesSource(settings_cls), YamlSource(settings_cls))


def _format_validation_error(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "settings"
        name = "GPUFLEET_" + loc.replace(".", "__").upper()
        value = err.get("input")
        shown = "" if isinstance(value, dict) else f" (got {value!r})"
        msg = err["msg"].removeprefix("Value error, ")
        lines.append(f"{name}: {msg}{shown}")
    return "; ".join(lines)


def load_settings(**overrides: Any) -> Settings:
    """Build Settings, turning validation errors into one clear ConfigError."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError(_format_validation_error(exc)) from None


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return load_settings()


def reset_settings_cache() -> None:
    get_settings.cache_clear()
