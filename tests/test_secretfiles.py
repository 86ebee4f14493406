"""Secrets given as files (GPUFLEET_*_FILE, systemd credentials), and never handed on in an environment."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpufleet.config import ConfigError, load_settings
from gpufleet.jobs.embedded import settings_env

SECRET = "Jx4q-7TnV0pLr2sWcY9eHb1KmUa8ZgQd3FoXi6NtB5yE"
URL = "postgresql+psycopg://gpufleet:pass-word-1@db.example:5432/gpufleet"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("GPUFLEET_") and not key.startswith("GPUFLEET_TEST_") or key == "CREDENTIALS_DIRECTORY":
            monkeypatch.delenv(key)


def test_file_settings_and_systemd_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "key").write_text(SECRET + "\n")
    monkeypatch.setenv("GPUFLEET_SECRET_KEY_FILE", str(tmp_path / "key"))
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "database_url").write_text(URL)
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(creds))
    s = load_settings(data_dir=tmp_path / "data")
    assert s.secret_key == SECRET and s.database_url == URL


def test_a_secret_given_twice_or_unreadable_is_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFLEET_REDIS_URL_FILE", str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="GPUFLEET_REDIS_URL_FILE: cannot read .*missing"):
        load_settings(data_dir=tmp_path)
    (tmp_path / "r").write_text("redis://127.0.0.1:6379/0")
    monkeypatch.setenv("GPUFLEET_REDIS_URL_FILE", str(tmp_path / "r"))
    monkeypatch.setenv("GPUFLEET_REDIS_URL", "redis://127.0.0.1:6379/1")
    with pytest.raises(ConfigError, match="keep only the file"):
        load_settings(data_dir=tmp_path)


def test_a_child_gets_the_secrets_as_private_files(tmp_path: Path) -> None:
    s = load_settings(data_dir=tmp_path / "data", secret_key=SECRET, database_url=URL)
    env = settings_env(s)
    assert not any(SECRET in v or "pass-word-1" in v for v in env.values())
    assert "GPUFLEET_SECRET_KEY_FILE" not in env  # the worker signs nothing
    path = Path(env["GPUFLEET_DATABASE_URL_FILE"])
    assert path.read_text() == URL and path.stat().st_mode & 0o077 == 0 and path.parent.stat().st_mode & 0o077 == 0
    child = {k: v for k, v in env.items() if k.startswith("GPUFLEET_")}
    os.environ.update(child)
    try:
        assert load_settings().database_url == URL
    finally:
        for k in child:
            os.environ.pop(k)
