"""A training's files, its resume and a clone from it through ``gpufleet.client.Client`` and the CLI, against the
product's app under uvicorn with sign-in.

No worker runs: the training is created and cancelled, and its checkpoint is put where a launcher writes one.
The real-worker path (a script that checkpoints, then resumes past it) is tests/trainings/test_script_stops.py.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli import app
from gpufleet.client import Client, Forbidden
from gpufleet.trainings.files import checkpoint_dir

from client.test_client import _signed_in
from support.fleet import register

TINY = {"max_steps": 4, "global_batch_size": 16, "checkpoint_every": 2, "log_every": 1}
PATH = "checkpoints/step-000002/model.pt"


def test_client_and_cli_list_download_resume_and_clone(tmp_path: Path, product_api) -> None:
    settings, tokens = _signed_in(tmp_path, simulate="1xH100-80GB")
    register(settings)
    url = product_api(settings)
    payload = os.urandom(3000)
    with Client(url, tokens["alice"]) as gf, Client(url, tokens["bob"]) as bob:
        t = gf.create_training(recipe="mlp", gpu_ids=[0], config=TINY)
        assert gf.cancel(t).status == "cancelled"
        (checkpoint_dir(settings, t.id) / "step-000002").mkdir(parents=True)
        (checkpoint_dir(settings, t.id) / PATH.removeprefix("checkpoints/")).write_bytes(payload)

        assert [(f.path, f.size) for f in gf.files(t).data] == [(PATH, 3000)]
        assert gf.download(t, PATH, tmp_path / "whole.pt").read_bytes() == payload
        assert gf.download(t, PATH, tmp_path / "part.pt", start=10, end=99).read_bytes() == payload[10:100]
        with pytest.raises(Forbidden):
            bob.files(t)
        with pytest.raises(Forbidden):
            bob.download(t, PATH, tmp_path / "not-bobs.pt")
        assert not (tmp_path / "not-bobs.pt").exists()

        runner = CliRunner()
        env = {"GPUFLEET_SERVER": url, "GPUFLEET_TOKEN": tokens["alice"], "COLUMNS": "200"}
        listed = runner.invoke(app, ["trainings", "files", str(t.id)[:8]], env=env)
        assert listed.exit_code == 0 and PATH in listed.stdout, listed.output

        # A clone: a new training linked to it, the source's config with this change.
        cloned = runner.invoke(app, ["train", "--recipe", "mlp", "--from", str(t.id), "--set", "max_steps=12",
                                     "--no-follow"], env=env)
        assert cloned.exit_code == 0, cloned.output
        clone = gf.get_training(next(w for w in cloned.stdout.split() if _is_uuid(w)))
        assert clone.id != t.id and str(clone.resumed_from) == str(t.id)
        assert clone.config["max_steps"] == 12 and clone.config["global_batch_size"] == 16

        # A resume: the same training, queued again, with a changed config.
        resumed = gf.resume(t, {"max_steps": 8})
        assert resumed.id == t.id and resumed.status == "queued" and resumed.max_steps == 8


def _is_uuid(word: str) -> bool:
    try:
        uuid.UUID(word.strip(":(),"))
        return True
    except ValueError:
        return False
