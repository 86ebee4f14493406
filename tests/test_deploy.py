"""The deployment files: docker-compose.yml is checked by structure (Docker cannot
run here), the health-check script is run for real."""

from __future__ import annotations

import http.server
import re
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from gpufleet.config import Settings
from gpufleet.db.models import Host
from gpufleet.db.session import session_scope, upgrade_database
from gpufleet.db.types import utcnow

ROOT = Path(__file__).resolve().parents[1]
HEALTHCHECK = ROOT / "deploy" / "healthcheck.py"


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def _env(service: dict) -> dict[str, str]:
    return {k: str(v) for k, v in service["environment"].items()}


def test_services_health_checks_and_order(compose: dict) -> None:
    services = compose["services"]
    assert {"postgres", "redis", "api", "worker", "migrate"} <= set(services)
    for name in ("postgres", "redis", "api", "worker"):
        hc = services[name]["healthcheck"]
        assert hc["test"][0] in ("CMD", "CMD-SHELL") and len(hc["test"]) > 1, name
    for name in ("api", "worker"):
        deps = services[name]["depends_on"]
        assert deps["postgres"]["condition"] == "service_healthy"
        assert deps["redis"]["condition"] == "service_healthy"
        assert deps["migrate"]["condition"] == "service_completed_successfully"
    assert services["migrate"]["command"] == ["gpufleet", "db", "upgrade"]


def test_volumes_are_declared_and_used(compose: dict) -> None:
    declared = set(compose["volumes"])
    used = set()
    for svc in compose["services"].values():
        for v in svc.get("volumes", []):
            source = v.split(":", 1)[0]
            if not source.startswith(("/", ".", "$")):
                used.add(source)
    assert used and used <= declared
    assert any(v.endswith(":/var/lib/postgresql/data") for v in compose["services"]["postgres"]["volumes"])
    # Training data is mounted read-only where data paths are checked and read.
    for name in ("api", "worker"):
        assert any(v.endswith(":/data:ro") for v in compose["services"][name]["volumes"]), name
        assert _env(compose["services"][name])["GPUFLEET_DATA_ROOT"] == "/data"


def test_api_is_safe_on_the_network(compose: dict) -> None:
    api = compose["services"]["api"]
    cmd = api["command"]
    assert cmd[:2] == ["gpufleet", "serve"] and cmd[cmd.index("--host") + 1] == "0.0.0.0"
    env = _env(api)
    assert env["GPUFLEET_AUTH"] == "on"
    # The secret and the database URL (with its password) are files, never environment variables.
    assert "GPUFLEET_SECRET_KEY" not in env and "GPUFLEET_DATABASE_URL" not in env
    assert env["GPUFLEET_SECRET_KEY_FILE"] == "/run/secrets/gpufleet_secret_key"
    assert env["GPUFLEET_DATABASE_URL_FILE"] == "/run/secrets/gpufleet_database_url"
    assert {"gpufleet_secret_key", "gpufleet_database_url"} <= set(api["secrets"])
    assert set(compose["secrets"]) == {"postgres_password", "gpufleet_database_url", "gpufleet_secret_key",
                                       "redis_password", "gpufleet_redis_url"}
    assert compose["services"]["postgres"]["environment"]["POSTGRES_PASSWORD_FILE"] == "/run/secrets/postgres_password"
    # Redis asks for a password too (a worker refuses members' code otherwise), read from a file.
    assert env["GPUFLEET_REDIS_URL_FILE"] == "/run/secrets/gpufleet_redis_url" and "GPUFLEET_REDIS_URL" not in env
    assert "gpufleet_redis_url" in api["secrets"]
    redis = compose["services"]["redis"]
    assert redis["secrets"] == ["redis_password"] and "requirepass" in " ".join(redis["command"])
    assert "REDISCLI_AUTH" in redis["healthcheck"]["test"][1]
    # Published on the host's loopback only: the TLS proxy is the way in.
    assert all(p.startswith("127.0.0.1:") for p in api["ports"])


def test_worker_gets_the_gpus(compose: dict) -> None:
    worker = compose["services"]["worker"]
    assert worker["command"][:3] == ["gpufleet", "worker", "--host-name"]
    devices = worker["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    assert _env(worker)["GPUFLEET_AUTH"] == "on"


def test_env_example_names_every_variable_compose_needs(compose: dict) -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    needed = set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*)", text))
    example = {
        line.split("=", 1)[0]
        for line in (ROOT / ".env.example").read_text().splitlines()
        if line and not line.startswith("#")
    }
    assert needed <= example, needed - example
    # No secret in .env: deploy/make-secrets.sh writes them as files.
    assert not {"GPUFLEET_SECRET_KEY", "POSTGRES_PASSWORD"} & example
    assert "deploy/make-secrets.sh" in (ROOT / ".env.example").read_text()


def test_systemd_units_and_proxy_config() -> None:
    api = (ROOT / "deploy/systemd/gpufleet-api.service").read_text()
    assert "ExecStartPre=/opt/gpufleet/venv/bin/gpufleet db upgrade" in api
    assert "--host 127.0.0.1" in api and "EnvironmentFile=" in api
    worker = (ROOT / "deploy/systemd/gpufleet-worker.service").read_text()
    assert "gpufleet worker --host-name" in worker and "PrivateDevices=yes" not in worker
    # Secrets as systemd credentials; the worker is root so that it can run trainings as their owners.
    assert "LoadCredential=secret_key:" in api and "LoadCredential=database_url:" in worker
    assert "User=root" in worker and "GPUFLEET_SECRET_KEY=" not in (ROOT / "deploy/gpufleet.env.example").read_text()
    nginx = (ROOT / "deploy/nginx/gpufleet.conf").read_text()
    assert "ssl_certificate" in nginx and "proxy_set_header Upgrade $http_upgrade" in nginx
    assert "location /api/v1/ws" in nginx and "X-Forwarded-Proto" in nginx


def _run_check(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(HEALTHCHECK), *args], capture_output=True, text=True, timeout=60,
                          env=env)


def test_api_healthcheck_follows_the_server() -> None:
    class Handler(http.server.BaseHTTPRequestHandler):
        status = 200

        def do_GET(self) -> None:
            self.send_response(Handler.status)
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/healthz"
    try:
        assert _run_check("api", "--url", url).returncode == 0
        Handler.status = 503
        r = _run_check("api", "--url", url)
        assert r.returncode == 1 and "503" in r.stderr
    finally:
        server.shutdown()
    r = _run_check("api", "--url", url)
    assert r.returncode == 1 and "not reachable" in r.stderr


def test_worker_healthcheck_follows_the_heartbeat(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    upgrade_database(settings)
    env = {**os.environ, "GPUFLEET_HOST_NAME": "hc-host"}
    r = _run_check("worker", env=env)
    assert r.returncode == 1 and "not registered" in r.stderr
    with session_scope(settings) as sess:
        sess.add(Host(name="hc-host", last_heartbeat=utcnow()))
    assert _run_check("worker", env=env).returncode == 0
    with session_scope(settings) as sess:
        from sqlalchemy import update

        sess.execute(update(Host).where(Host.name == "hc-host").values(last_heartbeat=utcnow() - timedelta(minutes=5)))
    r = _run_check("worker", env=env)
    assert r.returncode == 1 and "last heartbeat" in r.stderr


def test_compose_trusts_forwarded_headers_only_from_its_proxy(compose: dict) -> None:
    import json

    env = _env(compose["services"]["api"])
    assert "FORWARDED_ALLOW_IPS" not in env
    trusted = json.loads(env["GPUFLEET_TRUSTED_PROXIES"])
    gateway = compose["networks"]["default"]["ipam"]["config"][0]["gateway"]
    # Only the gateway: the address the host's proxy reaches the published port from.
    assert trusted == [gateway]


def test_the_docker_context_leaves_out_environments_and_builds() -> None:
    import fnmatch

    patterns = [p for p in (ROOT / ".dockerignore").read_text().splitlines() if p and not p.startswith("#")]

    def ignored(path: str) -> bool:
        # As Docker reads it: a pattern that matches a folder leaves out all inside; **/ matches at any depth.
        parts = path.split("/")
        return any(fnmatch.fnmatch("/".join(parts[:i]), pat)
                   or (pat.startswith("**/") and fnmatch.fnmatch(parts[i - 1], pat[3:]))
                   for pat in patterns for i in range(1, len(parts) + 1))

    for path in (".venv/bin/python", "frontend/node_modules/vite/package.json", "backend/gpufleet/static/index.html",
                 "test-artifacts/shot.png", ".env", "backend/gpufleet/__pycache__/cli.cpython-311.pyc", ".git/HEAD"):
        assert ignored(path), path
    # What the Dockerfile copies stays in.
    for path in ("pyproject.toml", "backend/gpufleet/cli.py", "alembic/env.py", "frontend/src/main.tsx",
                 "frontend/package-lock.json", "deploy/healthcheck.py"):
        assert not ignored(path), path


def test_the_dockerfile_installs_frontend_packages_before_copying_its_sources() -> None:
    lines = [l.strip() for l in (ROOT / "deploy" / "Dockerfile").read_text().splitlines()]
    npm_ci = lines.index("RUN npm ci")
    frontend_copies = [i for i, l in enumerate(lines) if l.startswith("COPY frontend/")]
    assert lines[frontend_copies[0]] == "COPY frontend/package.json frontend/package-lock.json ./"
    # Sources come after the install layer, and never the whole folder (it may hold node_modules).
    assert all(i > npm_ci for i in frontend_copies[1:]) and len(frontend_copies) > 1
    assert not any(lines[i].startswith("COPY frontend/ ") for i in frontend_copies)


def test_the_worker_with_the_hosts_pids_still_has_a_reaper(compose: dict) -> None:
    worker = compose["services"]["worker"]
    assert worker["pid"] == "host" and worker["init"] is True
    # tini is not PID 1 in the host's namespace; as a subreaper it still reaps orphans.
    assert _env(worker)["TINI_SUBREAPER"] == "1"


def test_every_file_gives_the_secret_length_the_server_enforces() -> None:
    from gpufleet.api.security.policy import MIN_SECRET_LEN

    files = [ROOT / n for n in ("README.md", "docs/operations.md", ".env.example", "deploy/gpufleet.env.example",
                                "docker-compose.yml")]
    stated = re.compile(r"(\d+)\+ (?:random )?characters|at least (\d+) characters")
    said = {f.name: {int(a or b) for a, b in stated.findall(f.read_text())} for f in files}
    assert all(lengths == {MIN_SECRET_LEN} for lengths in said.values()), said


def test_the_compose_redis_asks_for_the_password_in_its_secret_file(compose: dict, tmp_path: Path) -> None:
    """The redis service's own command and health check, run for real (the paths moved under tmp_path)."""
    import secrets as _secrets
    import time

    from support.servers import free_port

    redis = compose["services"]["redis"]
    (tmp_path / "pw").write_text(_secrets.token_urlsafe(48) + "\n")  # as deploy/make-secrets.sh writes it
    port = free_port()

    def here(line: str) -> str:
        return (line.replace("$$", "$").replace("/run/secrets/redis_password", str(tmp_path / "pw"))
                .replace("/tmp/redis.conf", str(tmp_path / "redis.conf")).replace("redis-cli", f"redis-cli -p {port}"))

    start = here(redis["command"][2]) + f" --port {port} --bind 127.0.0.1 --dir {tmp_path} --daemonize yes"
    assert subprocess.run(["sh", "-c", start], capture_output=True, timeout=30, check=False).returncode == 0
    try:
        healthy = False
        for _ in range(50):
            healthy = subprocess.run(["sh", "-c", here(redis["healthcheck"]["test"][1])], timeout=10,
                                     check=False).returncode == 0
            if healthy:
                break
            time.sleep(0.1)
        assert healthy
        anyone = subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True, text=True, timeout=10)
        assert "NOAUTH" in anyone.stdout + anyone.stderr
        assert (tmp_path / "redis.conf").stat().st_mode & 0o077 == 0
    finally:
        subprocess.run(["sh", "-c", f'REDISCLI_AUTH="$(cat {tmp_path}/pw)" redis-cli -p {port} shutdown nosave'],
                       capture_output=True, timeout=10, check=False)


def _unit_writable(unit: str) -> list[str]:
    """The paths a unit with ProtectSystem=strict may write: its ReadWritePaths ("-": optional)."""
    paths: list[str] = []
    for line in unit.splitlines():
        if line.startswith("ReadWritePaths="):
            paths += [p.lstrip("-") for p in line.split("=", 1)[1].split()]
    return paths


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _docs_worker_paths() -> dict[str, str]:
    """The table of docs/operations.md, "Where a worker writes": {path: setting}."""
    text = (ROOT / "docs/operations.md").read_text()
    section = text.split("## Where a worker writes", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(/[^`]+)` \| ([^|]+) \|", section, flags=re.M)
    return {path: setting.strip() for path, setting in rows}


def test_the_worker_unit_compose_and_docs_agree_on_where_trainings_write(compose: dict) -> None:
    unit = (ROOT / "deploy/systemd/gpufleet-worker.service").read_text()
    assert "ProtectSystem=strict" in unit and not re.search(r"^ProtectHome=", unit, flags=re.M)
    writable = _unit_writable(unit)
    docs = _docs_worker_paths()
    # Every path the docs require, the unit lets the worker write, and nothing the unit opens goes unexplained.
    assert {"/var/lib/gpufleet", "/home", "/srv/gpufleet/checkpoints"} <= set(docs), docs
    assert sorted(docs) == sorted(writable), (docs, writable)
    assert docs["/srv/gpufleet/checkpoints"] == "`GPUFLEET_CHECKPOINT_ROOT`"
    # The settings the example environment gives the unit's worker are writable under the unit.
    example = dict(line.split("=", 1) for line in (ROOT / "deploy/gpufleet.env.example").read_text().splitlines()
                   if line.startswith("GPUFLEET_") and "=" in line)
    for name in ("GPUFLEET_DATA_DIR", "GPUFLEET_CHECKPOINT_ROOT"):
        assert _under(example[name], writable), (name, example[name], writable)
    # The shared root the example names in its comment is one the unit opens.
    assert "GPUFLEET_CHECKPOINT_ROOT=/srv/gpufleet/checkpoints" in (ROOT / "deploy/gpufleet.env.example").read_text()
    # Compose: the worker's data dir and checkpoint root lie in a volume it mounts read-write.
    worker = compose["services"]["worker"]
    mounts = [v.split(":") for v in worker["volumes"]]
    rw = [m[1] for m in mounts if len(m) == 2 or m[2] != "ro"]
    for name in ("GPUFLEET_DATA_DIR", "GPUFLEET_CHECKPOINT_ROOT"):
        assert _under(_env(worker)[name], rw), (name, _env(worker)[name], rw)


def _credentials(unit: str) -> dict[str, str]:
    """A unit's LoadCredential= lines: {name: file}."""
    return dict(line.split("=", 1)[1].split(":", 1) for line in unit.splitlines()
                if line.startswith("LoadCredential="))


def test_each_unit_loads_every_secret_its_host_needs() -> None:
    """A GPU host's sessions relay signs with the server's secret, and both hosts reach Redis by its password."""
    from gpufleet.secretfiles import SECRET_SETTINGS

    worker = _credentials((ROOT / "deploy/systemd/gpufleet-worker.service").read_text())
    api = _credentials((ROOT / "deploy/systemd/gpufleet-api.service").read_text())
    assert set(worker) == set(api) == set(SECRET_SETTINGS), (worker, api)
    assert worker == api  # one file each, the same on every host
    for unit in ("gpufleet-worker.service", "gpufleet-api.service"):
        text = (ROOT / "deploy/systemd" / unit).read_text()
        for name, path in _credentials(text).items():
            assert f"/dev/null {path}" in text or name == "secret_key", (unit, name)  # the install lines make it


def test_the_env_example_and_the_worker_unit_give_a_worker_the_passwords_it_demands(tmp_path: Path,
                                                                                      monkeypatch) -> None:
    """The example's variables and the unit's credentials, written as the example says: members' code runs."""
    from gpufleet.config import load_settings
    from gpufleet.jobs.isolation import services_without_password

    example = (ROOT / "deploy/gpufleet.env.example").read_text()
    for line in example.splitlines():
        if line.startswith("GPUFLEET_") and "=" in line:
            monkeypatch.setenv(*line.split("=", 1))
    monkeypatch.setenv("GPUFLEET_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("GPUFLEET_CHECKPOINT_ROOT", str(tmp_path / "data" / "checkpoints"))
    creds = tmp_path / "credentials"
    creds.mkdir()
    for name, path in _credentials((ROOT / "deploy/systemd/gpufleet-worker.service").read_text()).items():
        said = re.search(re.escape(path) + r" \(([^ )]+)", example)
        value = said.group(1) if said else "x" * 48  # the secret: `gpufleet secret`
        (creds / name).write_text(value + "\n")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(creds))
    settings = load_settings()
    assert settings.redis_url and settings.redis_url.startswith("redis://:PASSWORD@")
    assert services_without_password(settings) == []


def test_the_grafana_scrape_job_reaches_the_shipped_deploy() -> None:
    """The API listens on loopback behind nginx's TLS: Prometheus scrapes nginx's name over https."""
    readme = (ROOT / "deploy/grafana/README.md").read_text()
    [job] = yaml.safe_load(readme.split("```yaml", 1)[1].split("```", 1)[0])["scrape_configs"]
    nginx = (ROOT / "deploy/nginx/gpufleet.conf").read_text()
    dashboard = nginx.split("# The dashboard and the API.", 1)[1].split("server {", 1)[1].split("}", 1)[0]
    names = re.search(r"server_name ([^;]+);", dashboard).group(1).split()
    assert job["scheme"] == "https"
    for target in job["static_configs"][0]["targets"]:
        host, _, port = target.partition(":")
        assert host in names and port in ("", "443"), (target, names)
    api = (ROOT / "deploy/systemd/gpufleet-api.service").read_text()
    assert "--host 127.0.0.1 --port 8000" in api and "127.0.0.1:8000" in readme


def test_the_api_unit_and_the_slurm_docs_give_the_one_change_pools_need() -> None:
    """Pools submit as each member (root) and write the checkpoint root; the unit as shipped is gpufleet's."""
    api = (ROOT / "deploy/systemd/gpufleet-api.service").read_text()
    assert re.search(r"^User=gpufleet$", api, flags=re.M) and "ProtectSystem=strict" in api
    drop_in = re.search(r"#   \[Service\]\n#   (User=root)\n#   (ReadWritePaths=(\S+))\n", api)
    assert drop_in, "the unit's comment gives the drop-in"
    docs = (ROOT / "docs/slurm.md").read_text()
    assert f"`{drop_in.group(1)}`, `{drop_in.group(2)}`" in docs and "systemctl edit gpufleet-api" in docs
    assert f"--checkpoint-root\n   {drop_in.group(3)}" in docs or f"--checkpoint-root {drop_in.group(3)}" in docs
