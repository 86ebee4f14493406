"""Safe defaults: sign-in unless single-user mode is asked for, single-user mode on loopback, and what `serve`
refuses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from support.people import SECRET, build_app
from gpufleet.api.security.policy import auth_required, check_serve_safety
from gpufleet.config import ConfigError, Settings, load_settings
from gpufleet.db.session import upgrade_database


@pytest.fixture
def local_client(settings: Settings) -> TestClient:
    single_user = settings.model_copy(update={"auth": "off"})
    upgrade_database(single_user)
    return TestClient(build_app(single_user))


def test_by_default_a_loopback_caller_must_sign_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUFLEET_AUTH")
    settings = load_settings(data_dir=tmp_path / "d", secret_key=SECRET)
    upgrade_database(settings)
    client = TestClient(build_app(settings))
    r = client.get("/api/v1/auth/whoami")
    assert r.status_code == 401 and "sign-in required" in r.json()["detail"]
    assert client.post("/api/v1/things").status_code == 401
    assert client.post("/api/v1/gpus/drain").status_code == 401
    assert client.app.state.created == []


def test_single_user_mode_acts_as_local_admin(local_client: TestClient) -> None:
    who = local_client.get("/api/v1/auth/whoami").json()
    assert who == {"name": "local", "role": "admin", "via": "local", "auth_required": False}
    assert local_client.post("/api/v1/things").json() == {"owner": "local"}
    assert local_client.post("/api/v1/gpus/drain").status_code == 200


def test_local_admin_refuses_proxied_and_cross_site_requests(local_client: TestClient) -> None:
    # A proxy in front means the request came from the network.
    r = local_client.post("/api/v1/things", headers={"X-Forwarded-For": "203.0.113.9"})
    assert r.status_code == 401 and "GPUFLEET_AUTH=on" in r.json()["detail"]
    # A page on another site must not drive the local server through the browser.
    r = local_client.post("/api/v1/things", headers={"Origin": "http://evil.example"})
    assert r.status_code == 403 and "Origin" in r.json()["detail"]
    # Reads from a foreign origin are harmless to state and stay allowed; CORS hides the answer.
    assert local_client.get("/api/v1/open-read", headers={"Origin": "http://evil.example"}).status_code == 200
    assert local_client.app.state.created == []


def test_when_sign_in_is_required(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUFLEET_AUTH")
    d = tmp_path / "d"
    # Loopback proves nothing about who is calling on a shared machine: sign-in is the default everywhere.
    assert auth_required(load_settings(data_dir=d))
    assert auth_required(load_settings(data_dir=d, host="0.0.0.0"))
    assert auth_required(load_settings(data_dir=d, database_url="postgresql://u@db/x"))
    # `auto`, the older default's name, means sign-in too.
    assert auth_required(load_settings(data_dir=d, auth="auto"))
    assert auth_required(load_settings(data_dir=d, auth="on"))
    # Single-user mode is asked for by name.
    assert not auth_required(load_settings(data_dir=d, auth="off"))
    assert not auth_required(load_settings(data_dir=d, database_url="postgresql://u@db/x", auth="off"))


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"host": "0.0.0.0"}, "GPUFLEET_AUTH=on"),
        ({"host": "0.0.0.0", "auth": "on"}, "GPUFLEET_SECRET_KEY"),
        ({"host": "0.0.0.0", "auth": "off", "secret_key": SECRET}, "GPUFLEET_AUTH=on"),
        ({"host": "10.1.2.3", "auth": "on", "secret_key": "short"}, "at least 32 characters"),
        ({"auth": "on"}, "GPUFLEET_SECRET_KEY"),
        ({"cors_origins": ["*"]}, "not '*'"),
        ({"cors_origins": ["not a url"]}, "not an origin"),
    ],
)
def test_serve_safety_refuses_with_what_to_set(tmp_path: Path, overrides: dict, needle: str) -> None:
    with pytest.raises(ConfigError) as exc:
        check_serve_safety(load_settings(data_dir=tmp_path, **overrides))
    assert needle in str(exc.value)


def test_serve_safety_accepts_safe_configurations(tmp_path: Path) -> None:
    check_serve_safety(load_settings(data_dir=tmp_path))
    check_serve_safety(load_settings(data_dir=tmp_path, host="0.0.0.0", auth="on", secret_key=SECRET))
    # The default signs people in: a secret is all it needs beyond loopback.
    auto = load_settings(data_dir=tmp_path, host="0.0.0.0", secret_key=SECRET, auth="auto")
    check_serve_safety(auto)
    assert auth_required(auto)
    check_serve_safety(
        load_settings(data_dir=tmp_path, host="::", auth="on", secret_key=SECRET, cors_origins=["https://gpus.example.org"])
    )


def test_serve_on_all_addresses_without_auth_refuses_to_start(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    env["GPUFLEET_DATA_DIR"] = str(tmp_path / "data")
    proc = subprocess.run(
        [sys.executable, "-m", "gpufleet.cli", "serve", "--host", "0.0.0.0"],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    message = " ".join(proc.stderr.split())
    assert "GPUFLEET_AUTH=on" in message and "GPUFLEET_SECRET_KEY" in message
    # It stopped before touching anything: no database was created.
    assert not (tmp_path / "data" / "gpufleet.db").exists()


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.9.8.7", True), ("::1", True), ("[::1]", True), ("localhost", True),
     ("127.0.0.1.nip.io", False), ("127.attacker.example", False), ("0.0.0.0", False), ("10.1.2.3", False)],
)
def test_loopback_is_decided_by_the_address(host: str, loopback: bool) -> None:
    from gpufleet.config import is_loopback_address

    assert is_loopback_address(host) is loopback


@pytest.mark.parametrize("secret", ["a" * 32, "ab" * 24, "0123456789" * 4])
def test_predictable_secrets_are_refused_with_how_to_make_one(tmp_path: Path, secret: str) -> None:
    with pytest.raises(ConfigError) as exc:
        check_serve_safety(load_settings(data_dir=tmp_path, auth="on", secret_key=secret))
    assert "gpufleet secret" in str(exc.value) and "too predictable" in str(exc.value)
