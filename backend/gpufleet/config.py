"""One Settings object for every gpufleet process.

Values come, lowest to highest priority, from defaults, the optional YAML file
named by ``GPUFLEET_CONFIG`` (its ``gpu:`` block and any top-level setting), and
``GPUFLEET_*`` environment variables. Invalid values fail at start with a
message naming the setting (see :func:`load_settings`).
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from gpufleet.config_services import ServiceSettings

# ConfigError is defined beside the secrets' source, which raises it too; it is this module's error.
from gpufleet.secretfiles import ConfigError, SecretFilesSource
from gpufleet.networksettings import NetworkSettings
from gpufleet.sessionsettings import SessionSettings
from gpufleet.yamlsource import YamlSource

DEFAULT_SECRET = "change-me"
LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}


class NVLinkConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    topology: Literal["auto", "ring", "mesh", "custom"] = "auto"
    bandwidth_test: bool = False


class GPUConfig(BaseModel):
    """The seed's ``gpu:`` block."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["auto", "single", "nvlink", "cpu"] = "auto"
    devices: list[int] | None = None
    max_models_per_gpu: int = Field(default=4, ge=1, le=64)
    allow_peer_access: bool = True
    nvlink: NVLinkConfig = Field(default_factory=NVLinkConfig)

    @field_validator("devices")
    @classmethod
    def _unique_devices(cls, v: list[int] | None) -> list[int] | None:
        if v is None:
            return v
        if any(i < 0 for i in v):
            raise ValueError("device indexes must be >= 0")
        if len(set(v)) != len(v):
            raise ValueError(f"device indexes must be unique, got {v}")
        return v


_SIM_PART = re.compile(r"^(\d+)x([A-Za-z0-9]+?)(?:-(\d+)GB)?$")


def parse_simulate_spec(spec: str) -> list[tuple[int, str, int | None]]:
    """Parse ``4xH100-80GB`` or ``2xRTX3090-24GB+1xA770-16GB``.

    Returns ``[(count, model, memory_gb or None), ...]``. Raises ``ValueError``
    with a message that shows the expected form.
    """
    parts = [p.strip() for p in spec.split("+") if p.strip()]
    if not parts:
        raise ValueError("empty spec; expected e.g. 4xH100-80GB or 2xRTX3090-24GB+1xA770-16GB")
    out: list[tuple[int, str, int | None]] = []
    for part in parts:
        m = _SIM_PART.match(part)
        if not m:
            raise ValueError(
                f"cannot read {part!r}; expected COUNTxMODEL[-MEMGB], e.g. 4xH100-80GB"
            )
        count = int(m.group(1))
        if not 1 <= count <= 64:
            raise ValueError(f"{part!r}: count must be between 1 and 64")
        mem = int(m.group(3)) if m.group(3) else None
        if mem is not None and not 1 <= mem <= 1024:
            raise ValueError(f"{part!r}: memory must be between 1 and 1024 GB")
        out.append((count, m.group(2), mem))
    return out


def _default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "gpufleet"


class Settings(ServiceSettings, SessionSettings, NetworkSettings):
    model_config = SettingsConfigDict(
        env_prefix="GPUFLEET_",
        env_nested_delimiter="__",
        extra="forbid",
    )

    # Where the embedded database, logs, checkpoints and the simulated fleet's
    # state live.
    data_dir: Path = Field(default_factory=_default_data_dir)
    database_url: str | None = None
    redis_url: str | None = None
    # Connections per process (PostgreSQL): the pool, what it may open beyond
    # it, and how long a background job waits for one.
    db_pool_size: int = Field(default=10, ge=1, le=1000)
    db_max_overflow: int = Field(default=20, ge=0, le=1000)
    db_pool_timeout_s: float = Field(default=30.0, gt=0, le=600)
    # How long a CLI write waits for SQLite's write lock before it says the database is busy.
    cli_busy_timeout_s: float = Field(default=10.0, gt=0, le=600)
    # API requests served at once per process; beyond it a request gets 429
    # with Retry-After at once instead of waiting for a connection. 0: the
    # pool size plus overflow, less a few for the scheduler and the streams,
    # and at most a few per core.
    max_concurrent_requests: int = Field(default=0, ge=0, le=100000)

    # The API.
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    cors_origins: list[str] = Field(default_factory=list)
    secret_key: str = DEFAULT_SECRET
    # Sign-in over TCP: ``on`` (``auto``: its older name); ``off``: single-user mode, loopback callers are admin.
    auth: Literal["on", "off", "auto"] = "on"
    # The Unix socket for local accounts: empty for the default (datadir.default_socket_path), ``off``, or a path;
    # and how long a `gpufleet open` sign-in link stays valid (it works once).
    unix_socket: str = ""
    sign_in_link_ttl_s: int = Field(default=120, ge=10, le=3600)
    # Host names (``gpus.example.org``, ``*.example.org``) the API answers to.
    # Without sign-in only loopback names are served whatever this says
    # (plus the names listed here); with sign-in, empty means any name.
    allowed_hosts: list[str] = Field(default_factory=list)
    # Addresses or networks of reverse proxies whose X-Forwarded-For/-Proto
    # headers count. Empty: no proxy header is trusted from anyone.
    trusted_proxies: list[str] = Field(default_factory=list)
    # One line per HTTP request on serve's output (uvicorn's access log: client, request line, status).
    access_log: bool = False
    # Who may read a training's config, events and logs: only its owner and admins (``owner``, the
    # default: logs often hold secrets a script printed), or the whole team (``team``).
    training_visibility: Literal["team", "owner"] = "owner"

    # This machine's name in the fleet (the Celery queue it consumes is named after it).
    host_name: str = Field(default_factory=socket.gethostname)

    # GPUs.
    simulate: str | None = None
    simulate_topology: Literal["nvlink-all", "nvlink-pairs", "pcie"] = "nvlink-all"
    # The CUDA context a simulated GPU's process holds (as measured on an H100, driver 580, torch 2.11).
    sim_context_mb: int = Field(default=963, ge=0, le=65536)
    gpu: GPUConfig = Field(default_factory=GPUConfig)

    # Trainings.
    data_root: Path | None = None
    checkpoint_root: Path | None = None
    collective_timeout_s: float = Field(default=60.0, gt=0, le=3600)
    lease_s: float = Field(default=30.0, ge=2, le=3600)
    # How long a stopping worker, or a preemption, gives the ranks to checkpoint before it kills them.
    stop_grace_s: float = Field(default=60.0, gt=0, le=3600)
    preemptible_default: bool = True
    admin_trainings_preemptible: bool = False
    # The highest priority a member may give a training unless an admin set a cap for them or
    # their group (gpufleet.users.groups.priority_cap); above 0 they could preempt each other's.
    member_max_priority: int = Field(default=0, ge=0, le=1000)
    idle_action: Literal["off", "warn", "stop"] = "warn"
    idle_threshold_percent: float = Field(default=5.0, ge=0, le=100)
    idle_window_s: float = Field(default=1800.0, ge=5, le=30 * 86400)
    log_max_bytes: int = Field(default=20 * 1024 * 1024, ge=4096)
    # Each host ships its trainings' logs to the database: how often, in rows of at most this many bytes.
    log_ship_interval_s: float = Field(default=1.0, gt=0, le=60)
    log_chunk_bytes: int = Field(default=64 * 1024, ge=1024, le=16 * 1024 * 1024)
    # Trainings across hosts: address other hosts reach this one at, NIC for collectives, meeting wait.
    advertise_address: str | None = None
    network_interface: str | None = None
    rendezvous_timeout_s: float = Field(default=120.0, gt=0, le=3600)
    max_queued_per_user: int = Field(default=500, ge=1)

    # Users' own code (script trainings, gpufleet.trainings).
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
    # <data_dir>/envs) and its size budget; where uv finds packages is in networksettings.py.
    env_cache_dir: Path | None = None
    env_cache_max_bytes: int = Field(default=50 * 1024**3, ge=0)
    # Who a member's training runs as, and where (gpufleet.users.runas, gpufleet.jobs.isolation).
    run_account: str = Field(default="gpufleet-run", min_length=1, max_length=32)
    sandbox: Literal["auto", "bwrap", "off"] = "auto"
    shared_account_runs: bool = False

    # Team use (gpufleet.api.auth and gpufleet.api.security.ratelimits).
    session_ttl_s: int = Field(default=12 * 3600, ge=60, le=30 * 86400)
    ws_ticket_ttl_s: int = Field(default=30, ge=5, le=300)
    create_rate_per_minute: int = Field(default=30, ge=1, le=10000)
    max_request_bytes: int = Field(default=1024 * 1024, ge=1024, le=1024 * 1024 * 1024)
    max_ws_message_bytes: int = Field(default=64 * 1024, ge=1024, le=16 * 1024 * 1024)
    # Memory estimates of the recommend/validate endpoints (gpufleet.scheduling.memory_pool):
    # processes that trace, the most seconds one trace may take, and requests per user a minute.
    estimate_workers: int = Field(default=2, ge=1, le=64)
    estimate_budget_s: float = Field(default=20.0, gt=0, le=600)
    # `serve` traces every recipe's default config at start, so the first estimate asked for is ready.
    estimate_warm: bool = True
    estimate_rate_per_minute: int = Field(default=30, ge=1, le=10000)

    # Telemetry.
    sample_interval_s: float = Field(default=1.0, gt=0.05, le=60)
    slow_sample_interval_s: float = Field(default=10.0, gt=0.1, le=600)
    retention_days: int = Field(default=7, ge=1, le=3650)
    rollup_retention_days: int = Field(default=90, ge=1, le=3650)
    foreign_memory_threshold_mb: int = Field(default=1024, ge=0)

    # Fair-share queue order (gpufleet.scheduling.fairshare): on/off, and the half-life of past usage.
    fair_share: bool = True
    fair_share_half_life_h: float = Field(default=168.0, gt=0, le=100_000)

    # `serve` runs the embedded worker and agent unless told not to.
    embedded_worker: bool = True

    @field_validator("simulate")
    @classmethod
    def _check_simulate(cls, v: str | None) -> str | None:
        if v is None or v.strip() == "" or v.strip().lower() in {"0", "off", "false", "no"}:
            return None
        parse_simulate_spec(v)
        return v.strip()

    @field_validator("trusted_proxies")
    @classmethod
    def _check_proxies(cls, v: list[str]) -> list[str]:
        for item in v:
            try:
                ipaddress.ip_network(item.strip(), strict=False)
            except ValueError:
                raise ValueError(f"{item!r} is not an IP address or network (e.g. 172.28.0.1 or 10.0.0.0/8)") from None
        return [item.strip() for item in v]

    @field_validator("allowed_hosts")
    @classmethod
    def _check_hosts(cls, v: list[str]) -> list[str]:
        out = []
        for item in v:
            name = item.strip().lower()
            if not name or "/" in name or " " in name or name == "*":
                raise ValueError(f"{item!r} is not a host name such as gpus.example.org or *.example.org")
            out.append(name)
        return out

    @field_validator("database_url")
    @classmethod
    def _check_db_url(cls, v: str | None) -> str | None:
        if v is None or v == "":
            return None
        if not (v.startswith("sqlite") or v.startswith("postgresql")):
            raise ValueError("must start with sqlite:// or postgresql:// (postgresql+psycopg://)")
        return v

    @field_validator("redis_url")
    @classmethod
    def _check_redis_url(cls, v: str | None) -> str | None:
        if v is None or v == "":
            return None
        if not (v.startswith("redis://") or v.startswith("rediss://") or v.startswith("unix://")):
            raise ValueError("must start with redis://, rediss:// or unix://")
        return v

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

    # Derived values ------------------------------------------------------

    @property
    def effective_database_url(self) -> str:
        """The database URL, with the embedded SQLite file as the default."""
        if self.database_url:
            url = self.database_url
            # psycopg 3 is the driver; accept the bare scheme people paste.
            if url.startswith("postgresql://"):
                url = "postgresql+psycopg://" + url[len("postgresql://"):]
            return url
        return f"sqlite:///{self.data_dir / 'gpufleet.db'}"

    @property
    def is_embedded(self) -> bool:
        """True when no external service is configured (SQLite and no Redis)."""
        return self.database_url is None and self.redis_url is None

    @property
    def is_sqlite(self) -> bool:
        return self.effective_database_url.startswith("sqlite")

    @property
    def logs_dir(self) -> Path:
        return self.data_dir / "logs"

    @property
    def sim_state_dir(self) -> Path:
        return self.data_dir / "sim"

    @property
    def is_loopback(self) -> bool:
        return is_loopback_address(self.host)

@lru_cache(maxsize=64)
def is_loopback_address(host: str) -> bool:
    """Whether ``host`` is a loopback address, or a name whose every address is loopback.

    Decided from the parsed address, never from how the text starts:
    ``127.0.0.1.nip.io`` is a public name that may resolve anywhere. A name
    that does not resolve is not loopback.
    """
    text = host.strip().strip("[]")
    if not text:
        return False
    try:
        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(text, None)
    except (OSError, UnicodeError):
        return False
    addresses = {info[4][0].split("%", 1)[0] for info in infos}
    try:
        return bool(addresses) and all(ipaddress.ip_address(a).is_loopback for a in addresses)
    except ValueError:
        return False


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
