"""A real nginx running deploy/nginx/gpufleet.conf as shipped, with only addresses and certificate swapped.

Needs the `nginx` and `openssl` programs (Debian: nginx-light, openssl; .ci/run installs them).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "deploy" / "nginx" / "gpufleet.conf"
NGINX = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/usr/local/sbin")
HAVE_TOOLS = bool(NGINX and shutil.which("openssl"))


def site_config(tmp: Path, api_port: int, notebooks_port: int, http_port: int, https_port: int,
                notebooks_https_port: int) -> Path:
    """The shipped site with test addresses: the dashboard's server block on ``https_port``, the
    notebooks' on ``notebooks_https_port`` (the shipped file puts both on 443, told apart by name)."""
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=gpus.example.org",
         "-keyout", str(tmp / "key.pem"), "-out", str(tmp / "cert.pem"), "-days", "1"],
        check=True, capture_output=True,
    )
    site = SHIPPED.read_text()
    for old, new in {
        "/etc/letsencrypt/live/gpus.example.org/fullchain.pem": str(tmp / "cert.pem"),
        "/etc/letsencrypt/live/gpus.example.org/privkey.pem": str(tmp / "key.pem"),
        "server 127.0.0.1:8000;": f"server 127.0.0.1:{api_port};",
        "server 127.0.0.1:8001;": f"server 127.0.0.1:{notebooks_port};",
        "listen 80;": f"listen 127.0.0.1:{http_port};",
        "listen [::]:80;": "",
        "listen [::]:443 ssl http2;": "",
    }.items():
        assert old in site, old
        site = site.replace(old, new)
    site = site.replace("/var/log/nginx/gpufleet.access.log", str(tmp / "access.log"))  # the main file's log too
    # The first 443 is the dashboard's server block, the second the notebooks'.
    assert site.count("listen 443 ssl http2;") == 2
    site = site.replace("listen 443 ssl http2;", f"listen 127.0.0.1:{https_port} ssl http2;", 1)
    site = site.replace("listen 443 ssl http2;", f"listen 127.0.0.1:{notebooks_https_port} ssl http2;", 1)
    (tmp / "site.conf").write_text(site)
    main = tmp / "nginx.conf"
    main.write_text(
        f"pid {tmp}/nginx.pid;\nerror_log {tmp}/error.log;\nevents {{}}\n"
        f"http {{\n access_log {tmp}/access.log;\n client_body_temp_path {tmp}/body;\n"
        f" proxy_temp_path {tmp}/proxy;\n include {tmp}/site.conf;\n}}\n"
    )
    return main


@contextmanager
def nginx(conf: Path, ready_url: str) -> Iterator[subprocess.Popen[bytes]]:
    """nginx on ``conf`` until the block ends; ``ready_url`` (https, self-signed) answers before it yields."""
    proc = subprocess.Popen([NGINX or "nginx", "-c", str(conf), "-g", "daemon off;"], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                said = proc.stderr.read().decode() if proc.stderr else ""
                raise AssertionError(f"nginx exited ({proc.returncode}): {said}")
            try:
                httpx.get(ready_url, timeout=2, verify=False)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, f"{ready_url} did not answer"
                time.sleep(0.2)
        yield proc
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
