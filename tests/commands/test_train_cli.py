"""``gpufleet train`` through typer's CliRunner (the lead wires register(app)
into gpufleet.cli)."""

from __future__ import annotations

from pathlib import Path

import typer
from typer.testing import CliRunner

from gpufleet.commands.train import register
from gpufleet.engine.checkpoint import newest_checkpoint


def _app() -> typer.Typer:
    app = typer.Typer()
    register(app)

    @app.command()
    def version() -> None:  # a second command keeps `train` a named subcommand
        pass

    return app


def test_train_local_runs_to_the_end_with_a_summary(tmp_path: Path):
    ckpt = tmp_path / "ck"
    result = CliRunner().invoke(_app(), [
        "train", "--local", "--recipe", "mlp", "--devices", "cpu", "--checkpoint-dir", str(ckpt),
        "--set", "max_steps=12", "--set", "log_every=4", "--set", "hidden=[8]", "--set", "global_batch_size=32",
    ])
    assert result.exit_code == 0, result.output
    assert "succeeded" in result.output and "mse" in result.output
    assert newest_checkpoint(ckpt).name == "step-12"


def test_train_refuses_bad_input_with_a_clear_message(tmp_path: Path):
    runner = CliRunner()
    cases = [
        (["--set", "max_steps=lots"], "max_steps"),
        (["--set", "nonsense=1"], "nonsense"),
        (["--recipe", "nope"], "unknown recipe"),
        (["--gpu-ids", "gpu0"], "cannot read device"),
        (["--devices", "cpu", "--world-size", "3"], "not divisible"),
        (["--config", str(tmp_path / "missing.yaml")], "does not exist"),
    ]
    for args, says in cases:
        result = runner.invoke(_app(), ["train", "--local", *args])
        assert result.exit_code == 2, (args, result.output)
        assert says in " ".join(result.output.split()), (args, result.output)  # rich wraps lines
    assert not (tmp_path / "gpufleet-data" / "local-runs").exists()  # nothing was started


def test_train_without_local_goes_to_a_server_not_here(tmp_path: Path, monkeypatch):
    # No server listens on this port: the command says so instead of training here.
    monkeypatch.setenv("GPUFLEET_SERVER", "http://127.0.0.1:9")
    result = CliRunner().invoke(_app(), ["train", "--recipe", "sae"])
    assert result.exit_code == 2 and "server" in result.output, result.output
    assert not (tmp_path / "gpufleet-data" / "local-runs").exists()


def test_train_names_every_wrong_field_of_a_yaml_config_and_its_overrides_at_once(tmp_path: Path):
    config = tmp_path / "run.yaml"
    config.write_text("d_in: abc\nlr: -1\nmax_stepz: 3\nk: 100000\n")
    result = CliRunner().invoke(_app(), ["train", "--local", "--recipe", "sae", "--config", str(config),
                                         "--set", "precision=fp8"])
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())  # rich wraps lines
    for field in ("d_in:", "lr:", "max_stepz:", "k:", "precision:"):
        assert field in said, (field, result.output)
    assert "unknown field" in said and "n_latents" in said
    assert not (tmp_path / "gpufleet-data" / "local-runs").exists()  # nothing was started


def test_train_local_across_three_vendors(tmp_path: Path, monkeypatch):
    import json

    from gpufleet.config import reset_settings_cache

    monkeypatch.setenv("GPUFLEET_SIMULATE", "1xH100-80GB+1xMI300X-192GB+1xMAX1550-128GB")
    monkeypatch.setenv("GPUFLEET_DATA_DIR", str(tmp_path / "data"))
    reset_settings_cache()
    result = CliRunner().invoke(_app(), [
        "train", "--local", "--recipe", "mlp", "--gpu-ids", "0,1,2", "--checkpoint-dir", str(tmp_path / "ck"),
        "--set", "max_steps=6", "--set", "log_every=3", "--set", "hidden=[8]", "--set", "global_batch_size=48",
        "--set", "parallel_mode=proportional",
    ])
    assert result.exit_code == 0, result.output
    assert newest_checkpoint(tmp_path / "ck").name == "step-6"
    (progress,) = (tmp_path / "data" / "local-runs").glob("*/progress.jsonl")
    lines = [json.loads(x) for x in progress.read_text().splitlines()]
    (start,) = [x for x in lines if x["type"] == "start"]
    assert start["devices"] == ["cuda:0", "hip:0", "xpu:0"]  # the fleet's IDs 0, 1, 2 on three vendors
    (layout,) = [x for x in lines if x["type"] == "layout"]
    assert [r["visible"] for r in layout["per_rank"]] == [
        {"CUDA_VISIBLE_DEVICES": "0"}, {"HIP_VISIBLE_DEVICES": "0"}, {"ZE_AFFINITY_MASK": "0"}]
    bad = CliRunner().invoke(_app(), ["train", "--local", "--recipe", "mlp", "--gpu-ids", "0,7"])
    assert bad.exit_code == 2 and "GPU 7 does not exist" in " ".join(bad.output.split()), bad.output
