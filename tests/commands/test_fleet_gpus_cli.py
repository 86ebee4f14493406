"""`gpufleet gpus` and `gpufleet topology` on a machine with no GPUs read the server's fleet, grouped by host."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from support.fleet import make_settings, register, unique

pytestmark = [pytest.mark.postgres]


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_") or k == "GPUFLEET_UNIX_SOCKET"}
    return subprocess.run([sys.executable, "-m", "gpufleet.cli", *args], env={**clean, "COLUMNS": "200", **env},
                          capture_output=True, text=True, timeout=120)


def test_gpus_and_topology_ask_the_server_and_local_reads_this_machine(tmp_path, request, product_api):
    a = make_settings(tmp_path / "a", "postgresql", request, host_name=unique("a"), simulate="2xH100-80GB")
    b = make_settings(tmp_path / "b", "postgresql", request, host_name=unique("b"), simulate="1xA100-40GB",
                      database_url=a.database_url)
    register(a), register(b)
    url = product_api(make_settings(tmp_path / "api", "postgresql", request, simulate=None, host_name=unique("api"),
                                    database_url=a.database_url))
    out = _cli("gpus", "--server", url)
    assert out.returncode == 0, out.stderr
    # Piped: one tab-separated list with a Host column.
    hosts = [line.split("\t")[0] for line in out.stdout.splitlines()[1:]]
    assert sorted(hosts) == [a.host_name, a.host_name, b.host_name], out.stdout
    assert out.stdout.count("H100") == 2 and out.stdout.count("A100") == 1, out.stdout
    body = json.loads(_cli("gpus", "--json", GPUFLEET_SERVER=url).stdout)
    assert sorted((g["host"], g["index"]) for g in body["data"]) == [(a.host_name, 0), (a.host_name, 1),
                                                                     (b.host_name, 0)]
    topo = _cli("topology", GPUFLEET_SERVER=url)
    assert topo.returncode == 0 and f"{a.host_name}:" in topo.stdout and "GPU1" in topo.stdout, \
        topo.stdout + topo.stderr
    local = _cli("gpus", "--local", GPUFLEET_SERVER=url)
    assert local.returncode == 0 and "No GPUs found" in local.stdout, local.stdout
    down = _cli("gpus", "--server", "http://127.0.0.1:9")
    assert down.returncode == 2 and "error:" in down.stderr and "Traceback" not in down.stderr
