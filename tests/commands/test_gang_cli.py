"""The CLI's side of a training across hosts: `train --hosts/--gpus-per-host/--spread` and `trainings show`."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gpufleet.commands.trainings import host_lines

runner = CliRunner()

HOSTS = [
    {"host": "a", "node_rank": 0, "ranks": [0, 1], "gpu_ids": [0, 1], "status": "running", "message": None},
    {"host": "b", "node_rank": 1, "ranks": [2, 3], "gpu_ids": [2, 3], "status": "failed",
     "message": "rank 3: RuntimeError: boom"},
]


def test_show_lists_each_host_with_its_ranks_gpus_and_step_times():
    lines = dict(host_lines({"hosts": HOSTS}, [0.010, 0.011, 0.012, 0.090]))
    assert lines["host 0"] == "a: ranks 0-1 on GPUs 0,1 (running)  step r0=10ms r1=11ms"
    assert lines["host 1"] == "b: ranks 2-3 on GPUs 2,3 (failed)  step r2=12ms r3=90ms — rank 3: RuntimeError: boom"
    assert host_lines({"hosts": None}, None) == []


def test_show_and_ls_name_every_host_of_a_training_across_hosts():
    from gpufleet.commands.trainings import show_fields

    from commands.test_output import TRAINING

    fields = dict(show_fields({**TRAINING, "hosts": HOSTS}))
    assert fields["host"] == "a+b" and fields["gpus"] == "0,1+2,3"
    assert dict(show_fields(TRAINING))["host"] == TRAINING["host_name"]


@pytest.mark.parametrize("args, expected", [
    (["--hosts", "2", "--gpus-per-host", "4"], {"hosts": 2, "gpus_per_host": 4}),
    (["--world-size", "8", "--spread"], {"spread": "auto", "world_size": 8}),
    (["--world-size", "8", "--hosts", "2"], {"hosts": 2, "world_size": 8}),
])
def test_train_sends_the_gang_fields(monkeypatch, args, expected):
    from gpufleet import cli
    from gpufleet.commands import trainings

    sent = []
    monkeypatch.setattr(trainings, "submit", lambda body, **kw: sent.append(body) or 0)
    r = runner.invoke(cli.app, ["train", "--recipe", "mlp", *args])
    assert r.exit_code == 0, r.output
    body = {k: v for k, v in sent[0].items() if k in ("hosts", "gpus_per_host", "spread", "world_size", "gpu_ids")}
    assert body == expected


def test_train_refuses_gang_fields_with_local_or_gpu_ids():
    from gpufleet import cli

    r = runner.invoke(cli.app, ["train", "--recipe", "mlp", "--local", "--hosts", "2"])
    assert r.exit_code == 2 and "drop --local, --gpu-ids and --host" in " ".join(r.output.split()), r.output
