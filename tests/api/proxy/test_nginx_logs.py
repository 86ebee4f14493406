"""Credentials in URLs stay out of nginx's access log: deploy/nginx/gpufleet.conf as shipped, under a real nginx.

A sign-in link's single-use code, a live stream's ticket and a notebook's ticket travel in query strings;
nginx's default log line holds the whole request line, so every code and ticket would sit in a file that
log readers, rotations and shippers keep. Nothing listens behind nginx here: what it logs is the point.
"""

from __future__ import annotations

import os
import secrets

import httpx
import pytest

from support.nginx import HAVE_TOOLS, nginx, site_config
from support.servers import free_port

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
pytestmark = pytest.mark.skipif(not HAVE_TOOLS and not IN_CI, reason="needs nginx and openssl")


def test_codes_and_tickets_in_urls_stay_out_of_the_access_log(tmp_path) -> None:
    https, notebooks_https = free_port(), free_port()
    conf = site_config(tmp_path, free_port(), free_port(), free_port(), https, notebooks_https)
    dashboard, notebooks = f"https://127.0.0.1:{https}", f"https://127.0.0.1:{notebooks_https}"
    code, ticket, nb_ticket = (secrets.token_urlsafe(24) for _ in range(3))
    with nginx(conf, f"{dashboard}/healthz"):
        with httpx.Client(verify=False, timeout=10) as client:
            for url in (f"{dashboard}/api/v1/auth/link?code={code}", f"{dashboard}/api/v1/ws?ticket={ticket}",
                        f"{notebooks}/notebooks/abc/lab?gpufleet_ticket={nb_ticket}"):
                client.get(url, headers={"Host": "gpus.example.org", "Referer": url})
    log = (tmp_path / "access.log").read_text()
    for path in ("/api/v1/auth/link", "/api/v1/ws", "/notebooks/abc/lab"):
        assert f"GET {path} HTTP/" in log, log  # each request is logged, its path kept
    for secret in (code, ticket, nb_ticket):
        assert secret not in log, log
