"""The scrape job deploy/grafana/README.md gives works: a real Prometheus scrapes a signed-in `gpufleet serve`
through the shipped nginx, over https, as the shipped deploy keeps `serve` on loopback behind it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import yaml

from support.nginx import HAVE_TOOLS, nginx, site_config
from support.servers import STRONG_SECRET, cli, free_port, serve_process

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "deploy" / "grafana" / "README.md"

pytestmark = pytest.mark.slow


def _scrape_job() -> dict:
    blocks = re.findall(r"```yaml\n(.*?)```", README.read_text(), re.S)
    return next(yaml.safe_load(b) for b in blocks if "scrape_configs" in b)["scrape_configs"][0]


def test_the_readme_scrape_job_is_up_on_a_signed_in_server(tmp_path: Path) -> None:
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail("prometheus is missing: .ci/run installs Debian's prometheus package")
        pytest.skip("prometheus is not installed (apt-get install prometheus)")
    if not HAVE_TOOLS:
        pytest.skip("nginx and openssl are needed (.ci/run installs them)")
    job = _scrape_job()
    assert job["scheme"] == "https"
    data = tmp_path / "data"
    env = {"GPUFLEET_AUTH": "on", "GPUFLEET_SECRET_KEY": STRONG_SECRET, "GPUFLEET_EMBEDDED_WORKER": "false"}
    # The README's two commands: a viewer, and its token in the file the job names.
    cli(data, "users", "add", "prometheus", "--role", "viewer", **env)
    token = cli(data, "tokens", "create", "prometheus", "--name", "scrape", **env).strip().splitlines()[-1].strip()
    token_file = tmp_path / "gpufleet.token"
    token_file.write_text(token + "\n")
    https_port = free_port()
    with serve_process(data, **env) as srv, nginx(
            site_config(tmp_path, srv.port, srv.sessions_port or free_port(), free_port(), https_port, free_port()),
            f"https://127.0.0.1:{https_port}/healthz"):
        assert httpx.get(f"https://127.0.0.1:{https_port}/metrics", timeout=10, verify=False).status_code == 401
        job["static_configs"] = [{"targets": [f"127.0.0.1:{https_port}"]}]
        job["tls_config"] = {"insecure_skip_verify": True}  # the test's certificate is its own, self-signed
        job["scrape_interval"] = "1s"
        job["authorization"]["credentials_file"] = str(token_file)
        config = tmp_path / "prometheus.yml"
        config.write_text(yaml.safe_dump({"scrape_configs": [job]}))
        checked = subprocess.run([shutil.which("promtool") or "promtool", "check", "config", str(config)],
                                 capture_output=True, text=True, timeout=60)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        port = free_port()
        prom = subprocess.Popen([prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                 f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    answer = httpx.get(f"http://127.0.0.1:{port}/api/v1/targets", timeout=5)
                except httpx.HTTPError:
                    answer = None
                # Until its storage is open Prometheus answers 503 "Service Unavailable", in plain text.
                if answer is not None and answer.status_code == 200:
                    active = answer.json()["data"]["activeTargets"]
                    if active and active[0]["health"] != "unknown":
                        break
                assert prom.poll() is None and time.monotonic() < deadline, "Prometheus did not scrape in 60 s"
                time.sleep(0.5)
        finally:
            prom.terminate()
            prom.wait(30)
    assert active[0]["health"] == "up", active[0]
