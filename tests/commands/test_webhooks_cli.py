"""`gpufleet webhooks add | ls | test | rm` against a real server, and a receiver on loopback."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from gpufleet.api.app import create_app
from gpufleet.config import load_settings
from gpufleet.db.session import upgrade_database
from support.receiver import Receiver, signed
from support.servers import gpufleet, serve_env, serve_inprocess


def _cli(data_dir: Path, url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*gpufleet(), "webhooks", *args, "--server", url], env=serve_env(data_dir),
                          capture_output=True, text=True, timeout=120)


def test_add_ls_test_rm(tmp_path: Path) -> None:
    # The receiver listens on loopback, which webhooks reach only when an admin allows it.
    settings = load_settings(data_dir=tmp_path / "data", auth="off", simulate="1xH100-80GB",
                             webhook_allowed_networks=["127.0.0.1/32"])
    upgrade_database(settings)
    receiver = Receiver()
    try:
        with serve_inprocess(create_app(settings)) as served:
            added = _cli(settings.data_dir, served.url, "add", receiver.url, "--events",
                         "training_failed,session_stopped", "--json")
            assert added.returncode == 0, added.stderr
            hook = json.loads(added.stdout)
            assert hook["secret"].startswith("whsec_") and hook["events"] == ["training_failed", "session_stopped"]
            listed = _cli(settings.data_dir, served.url, "ls")
            assert hook["id"] in listed.stdout and hook["secret"] not in listed.stdout
            tested = _cli(settings.data_dir, served.url, "test", hook["id"])
            assert tested.returncode == 0 and "delivered" in tested.stdout, tested.stdout + tested.stderr
            [(headers, raw)] = receiver.got
            assert headers["x-gpufleet-event"] == "test" and signed(hook["secret"], headers, raw)
            bad = _cli(settings.data_dir, served.url, "add", "ftp://example.org/x")
            assert bad.returncode == 2 and "http:// or https://" in bad.stderr
            assert _cli(settings.data_dir, served.url, "rm", hook["id"]).returncode == 0
            gone = _cli(settings.data_dir, served.url, "rm", hook["id"])
            assert gone.returncode == 2 and "no webhook" in gone.stderr
            assert "no webhooks" in _cli(settings.data_dir, served.url, "ls").stdout
    finally:
        receiver.close()
