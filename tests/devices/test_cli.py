"""`gpufleet gpus` and `gpufleet topology` through a Typer app, as the main CLI registers them."""

from __future__ import annotations

import json
import re

import pytest
import typer
from typer.testing import CliRunner

from gpufleet.commands.devices import gpus_app, register
from gpufleet.config import reset_settings_cache
from gpufleet.devices import simstate


@pytest.fixture
def cli():
    app = typer.Typer()

    @app.command()
    def other() -> None:
        """A second command, so the test app is a group like the real one."""

    register(app)
    runner = CliRunner()

    def run(*args: str, **env: str):
        reset_settings_cache()
        return runner.invoke(app, list(args), env={"COLUMNS": "200", **env})

    return run


def test_gpus_table_mixed_fleet(cli):
    r = cli("gpus", GPUFLEET_SIMULATE="2xRTX3090-24GB+1xA770-16GB")
    assert r.exit_code == 0, r.output
    rows = [line.split() for line in r.output.splitlines()]
    assert ["ID", "Vendor", "Model", "VRAM", "Free", "Backend", "UUID", "Status"] in rows
    assert rows_with(rows, "0")[:5] == ["0", "NVIDIA", "NVIDIA", "GeForce", "RTX"]
    assert "cuda:1" in r.output and "xpu:0" in r.output
    assert "Intel(R) Arc(TM) A770 Graphics" in r.output and "16.0 GiB" in r.output
    assert "simulated: 2xRTX3090-24GB+1xA770-16GB" in r.output
    assert r.output.count("ok sim") == 3
    assert r.output.count("GPU-") == 2  # NVIDIA UUIDs


def rows_with(rows, first):
    return next(r for r in rows if r and r[0] == first)


def test_gpus_json_shows_an_unhealthy_gpu(cli, tmp_path):
    data = tmp_path / "d"
    simstate.lose_gpu(data / "sim", 1)
    r = cli("gpus", "--json", GPUFLEET_SIMULATE="2xH100-80GB", GPUFLEET_DATA_DIR=str(data))
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["simulated"] is True
    assert [(g["index"], g["healthy"]) for g in out["gpus"]] == [(0, True), (1, False)]
    assert out["gpus"][0]["memory_total"] == 80 * 2**30 and "GPU is lost" in out["gpus"][1]["error"]
    table = cli("gpus", GPUFLEET_SIMULATE="2xH100-80GB", GPUFLEET_DATA_DIR=str(data))
    assert "unhealthy" in table.output


def test_gpus_without_gpus(cli):
    r = cli("gpus")
    assert r.exit_code == 0
    assert "No GPUs found" in r.output and "GPUFLEET_SIMULATE" in r.output
    assert json.loads(cli("gpus", "--json").output)["gpus"] == []


def test_bad_configuration_is_one_line_and_non_zero(cli):
    r = cli("gpus", GPUFLEET_SIMULATE="4xH100-80GIGS")
    assert r.exit_code == 2
    assert "GPUFLEET_SIMULATE" in r.output and "Traceback" not in r.output
    r = cli("topology", GPUFLEET_SIMULATE="2xH100-80GB", GPUFLEET_SIMULATE_TOPOLOGY="ring")
    assert r.exit_code == 2 and "GPUFLEET_SIMULATE_TOPOLOGY" in r.output


def test_topology_matrix_and_legend(cli):
    r = cli("topology", GPUFLEET_SIMULATE="4xH100-80GB", GPUFLEET_SIMULATE_TOPOLOGY="nvlink-pairs")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0].split() == ["GPU0", "GPU1", "GPU2", "GPU3"]
    assert lines[1].split() == ["GPU0", "X", "NV18", "NODE", "NODE"]
    assert lines[3].split() == ["GPU2", "NODE", "NODE", "X", "NV18"]
    assert "Peer access: GPU0-GPU1, GPU2-GPU3" in r.output
    assert "NV#  = a bonded set of # NVLinks" in r.output and "PIX" in r.output


def test_topology_json(cli):
    r = cli("topology", "--json", GPUFLEET_SIMULATE="4xH100-80GB", GPUFLEET_SIMULATE_TOPOLOGY="pcie")
    out = json.loads(r.output)
    assert out["matrix"][0] == ["X", "PIX", "NODE", "NODE"]
    assert out["peer_pairs"] == [[0, 1], [2, 3]]
    assert {(l["gpu_a"], l["gpu_b"]) for l in out["links"]} == {(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)}


def test_gpus_accepts_sub_commands(cli):
    @gpus_app.command("hello")
    def hello() -> None:
        typer.echo("sub-command ran")

    try:
        r = cli("gpus", "hello", GPUFLEET_SIMULATE="1xH100-80GB")
        assert r.exit_code == 0 and r.output.strip() == "sub-command ran"  # no table before it
    finally:
        gpus_app.registered_commands[:] = [c for c in gpus_app.registered_commands if c.name != "hello"]


# A terminal (rich reads TTY_COMPATIBLE), without colours so the widths are the text's.
TERMINAL = {"TTY_COMPATIBLE": "1", "NO_COLOR": "1"}


def test_gpus_fits_80_columns_and_wide_shows_whole_uuids(cli):
    r = cli("gpus", GPUFLEET_SIMULATE="4xH100-80GB", COLUMNS="80", **TERMINAL)
    assert r.exit_code == 0, r.output
    out = re.sub(r"\x1b\[[0-9;]*m", "", r.output)  # bold headers: the terminal's styles, not text
    assert max(len(line) for line in out.splitlines()) <= 80, out
    assert "80.0 GiB" in out and "GPU-" not in out  # no UUID folded over four lines
    assert "UUID hidden" in out and "--wide" in out
    wide = cli("gpus", "--wide", GPUFLEET_SIMULATE="4xH100-80GB", COLUMNS="80", **TERMINAL)
    uuids = json.loads(cli("gpus", "--json", GPUFLEET_SIMULATE="4xH100-80GB").output)["gpus"]
    for g in uuids:
        assert any(g["uuid"] in line for line in wide.output.splitlines()), wide.output


def test_piped_gpus_are_tab_separated_lines_with_every_column(cli):
    """Into a pipe every list is for a script: one line per GPU, tabs between whole cells, headers first."""
    r = cli("gpus", GPUFLEET_SIMULATE="4xH100-80GB", COLUMNS="80")
    assert r.exit_code == 0, r.output
    lines = [line.split("\t") for line in r.output.splitlines() if "\t" in line]
    assert lines[0] == ["ID", "Vendor", "Model", "VRAM", "Free", "Backend", "UUID", "Status"]
    assert [row[0] for row in lines[1:]] == ["0", "1", "2", "3"] and all(len(row) == 8 for row in lines)
    assert all(row[6].startswith("GPU-") and len(row[6]) == 40 for row in lines[1:])  # whole UUIDs
    assert all(row[7] == "ok sim" for row in lines[1:]) and "│" not in r.output
