"""A lab's network, end to end: a script with a requirements.txt builds its environment from a package
index served over HTTPS with a certificate of the lab's own authority, through the lab's HTTP proxy,
and the script's own download goes the same way (`gpufleet run`, a real server, scheduler, Celery
worker, uv and rank process; simulated GPUs).

Nothing is mocked: the authority is made here with openssl, the index is a PEP 503 folder served by
Python's http.server over TLS, and the proxy relays CONNECT tunnels and records them
(support/labnet.py). uv trusts only its bundled public roots unless told otherwise, so without the
certificate settings reaching it the build fails with `invalid peer certificate: UnknownIssuer`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from support.fleet import make_settings, register
from support.labnet import connect_proxy, https_index, make_authority, write_simple_index
from support.wheels import make_wheel
from trainings.test_script_env_worker import FINAL, _env_events, _project, _submit
from trainings.test_script_worker import _log, _wait

pytestmark = pytest.mark.slow

# The rank fetches the index page itself, as a script downloading its data set would: Python's
# urllib reads the proxy from https_proxy/HTTPS_PROXY and the authorities from SSL_CERT_FILE.
DOWNLOADS = '''\
import os, ssl, sys, urllib.request
import gpufleet_testdep
from gpufleet_report import report
index = sys.argv[1]
page = urllib.request.urlopen(index + "/simple/gpufleet-testdep/", timeout=30).read().decode()
print("index page lists", "gpufleet_testdep-1.0-py3-none-any.whl" in page, flush=True)
print("proxy", os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy"), flush=True)
report(1, loss=0.5, answer=gpufleet_testdep.ANSWER)
'''
# Whatever the machine running the tests has set is not the lab under test.
CLEAN = {name: "" for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy",
                               "all_proxy", "no_proxy", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE",
                               "CURL_CA_BUNDLE", "PIP_INDEX_URL", "UV_INDEX_URL", "UV_DEFAULT_INDEX")}


@pytest.fixture
def lab(tmp_path):
    authority = make_authority(tmp_path / "authority")
    wheel = make_wheel(tmp_path / "built", "gpufleet-testdep", "1.0", {"__init__.py": "ANSWER = 42\n"})
    write_simple_index(tmp_path / "index", [wheel])
    with https_index(tmp_path / "index", authority) as (url, served), connect_proxy() as proxy:
        yield authority, url, served, proxy


def _start(tmp_path: Path, workers, scheduler, live_server, worker_env: dict[str, str], **settings_kw) -> str:
    settings = make_settings(tmp_path, "sqlite", **settings_kw)
    register(settings)
    workers(settings, env={**CLEAN, **worker_env})
    scheduler(settings)
    return live_server(settings)


def _check_through_the_lab(base: str, tid: str, url: str, served: list[str], proxy) -> None:
    body = _wait(base, tid, FINAL, 300)
    assert body["status"] == "succeeded", body["status_reason"]
    assert any("environment ready" in r and "(built)" in r for r in _env_events(base, tid))
    log = _log(base, tid)
    assert "index page lists True" in log and f"proxy {proxy.url}" in log, log
    host = url.removeprefix("https://")
    assert host in proxy.tunnels  # uv and the rank went through the proxy, not around it
    assert "/simple/gpufleet-testdep/gpufleet_testdep-1.0-py3-none-any.whl" in served  # uv fetched the wheel


def test_the_standard_variables_reach_uv_and_the_ranks(tmp_path, lab, workers, scheduler, live_server):
    authority, url, served, proxy = lab
    base = _start(tmp_path, workers, scheduler, live_server,
                  {"SSL_CERT_FILE": str(authority.cert), "HTTPS_PROXY": proxy.url, "UV_INDEX_URL": f"{url}/simple/"})
    project = _project(tmp_path / "proj", DOWNLOADS, "gpufleet-testdep==1.0\n")
    tid = _submit(base, project, "--", "python", "train.py", url)
    _check_through_the_lab(base, tid, url, served, proxy)


def test_the_ca_bundle_and_index_settings_and_a_blocked_proxy(tmp_path, lab, workers, scheduler, live_server):
    authority, url, served, proxy = lab
    base = _start(tmp_path, workers, scheduler, live_server, {"https_proxy": proxy.url, "HTTPS_PROXY": "http://127.0.0.1:9"},
                  ca_bundle=authority.cert, env_index_url=f"{url}/simple/", training_env_block=["HTTPS_PROXY"])
    project = _project(tmp_path / "proj", DOWNLOADS, "gpufleet-testdep==1.0\n")
    tid = _submit(base, project, "--", "python", "train.py", url)
    # The worker's HTTPS_PROXY names a closed port: only the admin's block keeps it from breaking the build.
    _check_through_the_lab(base, tid, url, served, proxy)


def test_without_the_authority_the_build_fails_naming_the_certificate(tmp_path, lab, workers, scheduler,
                                                                     live_server):
    authority, url, served, proxy = lab
    base = _start(tmp_path, workers, scheduler, live_server, {"HTTPS_PROXY": proxy.url},
                  env_index_url=f"{url}/simple/")
    project = _project(tmp_path / "proj", DOWNLOADS, "gpufleet-testdep==1.0\n")
    tid = _submit(base, project, "--", "python", "train.py", url)
    body = _wait(base, tid, FINAL, 300)
    assert body["status"] == "failed" and "cannot build the environment" in body["status_reason"]
    reason = body["status_reason"]
    assert "UnknownIssuer" in reason and "GPUFLEET_CA_BUNDLE" in reason, reason
