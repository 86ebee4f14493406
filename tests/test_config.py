"""Settings: defaults, the YAML gpu block, and errors that name the setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.config import ConfigError, load_settings, parse_simulate_spec


def test_embedded_default(tmp_path: Path) -> None:
    s = load_settings(data_dir=tmp_path)
    assert s.is_embedded and s.is_sqlite
    assert s.effective_database_url == f"sqlite:///{tmp_path / 'gpufleet.db'}"
    assert s.host == "127.0.0.1" and s.port == 8000
    assert s.data_root == tmp_path / "data"
    assert s.gpu.mode == "auto" and s.gpu.max_models_per_gpu == 4


def test_env_prefix_and_nested_gpu_block(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFLEET_SIMULATE", "2xRTX3090-24GB+1xA770-16GB")
    monkeypatch.setenv("GPUFLEET_GPU__MAX_MODELS_PER_GPU", "2")
    monkeypatch.setenv("GPUFLEET_DATABASE_URL", "postgresql://u:p@db:5432/gpufleet")
    s = load_settings()
    assert s.simulate == "2xRTX3090-24GB+1xA770-16GB"
    assert s.gpu.max_models_per_gpu == 2
    # psycopg 3 is the driver whatever scheme is pasted.
    assert s.effective_database_url.startswith("postgresql+psycopg://")
    assert not s.is_embedded


def test_yaml_gpu_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "gpufleet.yaml"
    cfg.write_text(
        "gpu:\n  mode: nvlink\n  devices: [0, 1, 2, 3]\n  max_models_per_gpu: 4\n"
        "  allow_peer_access: true\n  nvlink: {enabled: true, topology: ring, bandwidth_test: false}\n"
    )
    monkeypatch.setenv("GPUFLEET_CONFIG", str(cfg))
    s = load_settings()
    assert s.gpu.mode == "nvlink" and s.gpu.devices == [0, 1, 2, 3]
    assert s.gpu.nvlink.enabled and s.gpu.nvlink.topology == "ring"
    # The environment wins over the file.
    monkeypatch.setenv("GPUFLEET_GPU__MODE", "single")
    assert load_settings().gpu.mode == "single"


@pytest.mark.parametrize(
    ("env", "value", "named"),
    [
        ("GPUFLEET_GPU__MODE", "turbo", "GPUFLEET_GPU__MODE"),
        ("GPUFLEET_SIMULATE", "4xH100-80", "GPUFLEET_SIMULATE"),
        ("GPUFLEET_SIMULATE", "fourxH100", "GPUFLEET_SIMULATE"),
        ("GPUFLEET_DATABASE_URL", "mysql://x", "GPUFLEET_DATABASE_URL"),
        ("GPUFLEET_PORT", "99999", "GPUFLEET_PORT"),
        ("GPUFLEET_SIMULATE_TOPOLOGY", "torus", "GPUFLEET_SIMULATE_TOPOLOGY"),
    ],
)
def test_invalid_values_name_the_setting(monkeypatch: pytest.MonkeyPatch, env: str, value: str, named: str) -> None:
    monkeypatch.setenv(env, value)
    with pytest.raises(ConfigError) as exc:
        load_settings()
    assert named in str(exc.value)
    assert "\n" not in str(exc.value)


def test_bad_yaml_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFLEET_CONFIG", str(tmp_path / "missing.yaml"))
    with pytest.raises(ConfigError, match="GPUFLEET_CONFIG"):
        load_settings()
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpu:\n  mode: [unclosed\n")
    monkeypatch.setenv("GPUFLEET_CONFIG", str(bad))
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_settings()
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("gpu:\n  modes: auto\n")
    monkeypatch.setenv("GPUFLEET_CONFIG", str(unknown))
    with pytest.raises(ConfigError, match="GPUFLEET_GPU__MODES"):
        load_settings()


def test_parse_simulate_spec() -> None:
    assert parse_simulate_spec("4xH100-80GB") == [(4, "H100", 80)]
    assert parse_simulate_spec("2xRTX3090-24GB+1xA770-16GB") == [(2, "RTX3090", 24), (1, "A770", 16)]
    assert parse_simulate_spec("8xA100") == [(8, "A100", None)]
    for bad in ("", "x", "0xH100-80GB", "100xH100", "2xH100-0GB"):
        with pytest.raises(ValueError):
            parse_simulate_spec(bad)


def test_every_setting_survives_the_trip_to_a_child_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker, a launcher or a gang member rebuilds the settings from ``settings_env``: None goes as "", and
    every field must read "" back as its default (GPUFLEET_SESSIONS_PORT once did not, and no worker started)."""
    from gpufleet.jobs.embedded import settings_env

    parent = load_settings(data_dir=tmp_path / "d")
    for key, value in settings_env(parent).items():
        if key.startswith("GPUFLEET_") and not key.startswith("GPUFLEET_TEST_"):
            monkeypatch.setenv(key, value)
    child = load_settings()
    assert child.sessions_port is None and child.data_dir == parent.data_dir
