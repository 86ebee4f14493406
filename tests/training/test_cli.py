"""``gpufleet train`` through typer's CliRunner (the lead wires register(app)
into gpufleet.cli)."""

from __future__ import annotations

from pathlib import Path

import typer
from typer.testing import CliRunner

from gpufleet.commands.train import register
from gpufleet.training.checkpoint import newest_checkpoint


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
