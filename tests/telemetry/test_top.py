"""`gpufleet top` against a real server."""

from __future__ import annotations

import subprocess
import time
import uuid

import pytest
from typer.testing import CliRunner

from gpufleet.cli import app
from gpufleet.config import load_settings
from gpufleet.db.models import Training
from gpufleet.db.session import session_scope, upgrade_database
from gpufleet.telemetry.live import LOCAL

from .test_routes import _fleet
from support.servers import gpufleet, serve_env, serve_inprocess, serve_process, socket_path

from .wsutil import build_app


def test_top_shows_bars_and_who_holds_each_gpu(tmp_path):
    s = load_settings(data_dir=tmp_path / "d")
    upgrade_database(s)
    tid = uuid.uuid4()
    with session_scope(s) as sess:
        sess.add(Training(id=tid, name="sae-big", owner="alice", recipe="sae", config={}, status="running",
                          step=120, max_steps=1000))
    LOCAL.clear()
    LOCAL.put_host("h1", _fleet(tid))
    try:
        with serve_inprocess(build_app(s)) as srv:
            res = CliRunner().invoke(app, ["top", "--server", srv.url, "--once"], env={"COLUMNS": "160"})
    finally:
        LOCAL.clear()
    assert res.exit_code == 0, res.output
    out = res.output
    assert "h1" in out and "H100 80GB HBM3" in out
    assert "sae-big (alice) step 120/1000" in out  # the training and its owner
    assert "8 bob jupyter" in out  # the foreign process and its user
    assert " 91%" in out and "71°C" in out and "612W/700W" in out
    assert "LOST" in out and "1 lost" in out
    assert "█" in out and "idle" in out


def test_top_fits_80_columns_without_chopping_every_word(tmp_path):
    s = load_settings(data_dir=tmp_path / "d")
    upgrade_database(s)
    tid = uuid.uuid4()
    with session_scope(s) as sess:
        sess.add(Training(id=tid, name="long-run-name", owner="lorenzo", recipe="sae", config={},
                          status="running", step=27, max_steps=1000))
    LOCAL.clear()
    LOCAL.put_host("h1", _fleet(tid))
    try:
        with serve_inprocess(build_app(s)) as srv:
            narrow = CliRunner().invoke(app, ["top", "--server", srv.url, "--once"], env={"COLUMNS": "80"})
            wide = CliRunner().invoke(app, ["top", "--server", srv.url, "--once", "--wide"],
                                      env={"COLUMNS": "80"})
    finally:
        LOCAL.clear()
    assert narrow.exit_code == 0, narrow.output
    lines = narrow.output.splitlines()
    assert max(len(line) for line in lines) <= 80, narrow.output
    # "held by" keeps the training's name and owner whole, on one line.
    assert any("long-run-name (lorenzo)" in line for line in lines), narrow.output
    assert "hidden to fit 80 columns" in narrow.output
    assert "long-run-name (lorenzo) step 27/1000" in wide.output and "°C" in wide.output


def test_top_says_what_to_fix_when_the_server_is_unreachable_or_the_options_are_wrong():
    runner = CliRunner()
    res = runner.invoke(app, ["top", "--server", "http://127.0.0.1:9", "--once"])
    assert res.exit_code == 2 and "cannot reach the server at http://127.0.0.1:9" in res.output
    res = runner.invoke(app, ["top", "--server", "127.0.0.1:8000", "--once"])
    assert res.exit_code == 2 and "--server: the server must be an http:// or https:// URL" in res.output
    res = runner.invoke(app, ["top", "--interval", "0", "--once"])
    assert res.exit_code == 2 and "--interval must be between" in res.output


def test_top_honours_gpufleet_server(tmp_path, monkeypatch):
    """With no --server, `top` asks $GPUFLEET_SERVER (like every server command), not this machine's port."""
    s = load_settings(data_dir=tmp_path / "d")
    upgrade_database(s)
    LOCAL.clear()
    LOCAL.put_host("h1", _fleet(uuid.uuid4()))
    try:
        with serve_inprocess(build_app(s)) as srv:
            monkeypatch.setenv("GPUFLEET_SERVER", srv.url)
            res = CliRunner().invoke(app, ["top", "--once"], env={"COLUMNS": "160"})
    finally:
        LOCAL.clear()
    assert res.exit_code == 0, res.output
    assert f"gpufleet top — {srv.url}" in res.output and "H100 80GB HBM3" in res.output


@pytest.mark.slow
def test_top_reaches_this_machines_server_through_its_socket_on_any_port_without_a_token(tmp_path):
    """As every other command: no --server and no $GPUFLEET_SERVER means this machine's server, through its
    socket, so neither the port `serve --port` (or start.sh) chose nor sign-in stands in the way."""
    data = tmp_path / "data"
    # Sign-in on (the product's default): over TCP a caller needs a token; on the socket it is known by its uid.
    with serve_process(data, GPUFLEET_AUTH=None, GPUFLEET_EMBEDDED_WORKER="false") as srv:
        env = {**serve_env(data, GPUFLEET_AUTH=None), "COLUMNS": "160"}
        env.pop("GPUFLEET_SERVER", None)
        assert srv.port != 8000
        wait = time.monotonic() + 60
        while True:
            res = subprocess.run([*gpufleet(), "top", "--once"], env=env, capture_output=True, text=True, timeout=120)
            if "H100" in res.stdout or time.monotonic() > wait:
                break
            time.sleep(0.5)  # the agent's first inventory
        assert res.returncode == 0, res.stdout + res.stderr
        assert f"gpufleet top — {socket_path(data)} (this machine's socket)" in res.stdout, res.stdout
        assert "2 GPUs" in res.stdout and "H100" in res.stdout, res.stdout
        tcp = subprocess.run([*gpufleet(), "top", "--once", "--server", srv.url], env=env, capture_output=True,
                             text=True, timeout=120)
        assert tcp.returncode == 2 and "needs sign-in" in tcp.stderr, tcp.stdout + tcp.stderr
