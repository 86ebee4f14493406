"""One convention for every command against a live server (a registered simulated fleet of 4 H100s, no
worker): `run` checks --gpus, --memory and --from before it packs or uploads anything, takes a short ID
or a name for --from and names its options in refusals; piped lists are tab-separated; `trainings
show --json`; `users ls`; sessions are listed as sessions, not as trainings."""

from __future__ import annotations

import json

import httpx
import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from gpufleet.cli import app
from gpufleet.db.models import CodeBlob
from gpufleet.db.session import session_scope
from support.fleet import make_settings, register

runner = CliRunner()


@pytest.fixture
def fleet(tmp_path, monkeypatch, product_api):
    settings = make_settings(tmp_path, "sqlite", simulate="4xH100-80GB")
    register(settings)
    url = product_api(settings)
    monkeypatch.setenv("GPUFLEET_SERVER", url)
    project = tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text("print('hello')\n")
    monkeypatch.chdir(project)
    return settings, url


def _uploaded(settings) -> int:
    with session_scope(settings) as sess:
        return sess.scalar(select(func.count()).select_from(CodeBlob)) or 0


def test_run_refuses_what_can_never_run_before_it_uploads_naming_its_options(fleet):
    settings, url = fleet
    cases = [
        (["--gpus", "8"], "--gpus 8 needs 8 GPUs on one host and can never run here"),
        (["--memory", "200GiB"], "--memory: one rank needs 200.0 GiB, more than the largest GPU in the fleet"),
        (["--memory", "lots"], "--memory lots: 'lots' is not a size"),
        (["--from", "nothing-like-this"], "--from nothing-like-this: no training has the ID, ID prefix or name"),
        (["--host", "elsewhere"], "--host elsewhere: no such host"),
    ]
    for args, says in cases:
        r = runner.invoke(app, ["run", "--no-follow", *args, "--", "python", "train.py"])
        assert r.exit_code == 2 and says in " ".join(r.output.split()), (args, r.output)
        assert "uploaded code" not in r.output and "world_size" not in r.output and "memory_mb" not in r.output
    assert _uploaded(settings) == 0  # nothing was packed and sent for any of them


def test_run_from_takes_a_short_id_or_a_name_like_every_command(fleet):
    settings, url = fleet
    src = httpx.post(f"{url}/api/v1/trainings", json={"name": "first-run", "recipe": "mlp"}, timeout=60).json()
    for ref in (src["id"][:8], "first-run"):
        r = runner.invoke(app, ["run", "--no-follow", "--from", ref, "--", "python", "train.py"])
        # Resolved to the full ID, and refused before any upload: a script starts from a script's checkpoint.
        assert r.exit_code == 2, r.output
        said = " ".join(r.output.split())
        assert f"--from {ref}: training {src['id']} is a recipe training of recipe mlp" in said, said
        assert "gpufleet train --recipe mlp --from" in said and "uploaded code" not in said, said
    assert _uploaded(settings) == 0


def test_piped_lists_are_tab_separated_and_sessions_are_listed_as_sessions(fleet):
    settings, url = fleet
    session = httpx.post(f"{url}/api/v1/sessions", json={"gpus": 2, "jupyter": True}, timeout=60)
    assert session.status_code in (200, 201), session.text
    sid = session.json()["id"]
    training = httpx.post(f"{url}/api/v1/trainings", json={"name": "a-training", "recipe": "mlp"}, timeout=60).json()
    lines = [line.split("\t") for line in runner.invoke(app, ["session", "ls"]).stdout.splitlines()]
    assert lines[0][:5] == ["id", "owner", "mode", "status", "gpus"]
    assert [row[0] for row in lines[1:]] == [sid] and lines[1][4] == "2"  # the whole ID; gpus: how many
    listed = runner.invoke(app, ["trainings", "ls"]).stdout
    assert training["id"] in listed and sid not in listed  # `session ls` lists sessions, `trainings ls` trainings
    both = httpx.get(f"{url}/api/v1/trainings", params={"sessions": "true"}, timeout=30).json()["data"]
    assert {t["id"] for t in both} == {sid, training["id"]}
    shown = runner.invoke(app, ["trainings", "show", training["id"][:8], "--json"])
    assert shown.exit_code == 0 and json.loads(shown.stdout)["id"] == training["id"]
    for name in ("ls", "list"):  # `users ls` like every other list; `list` still works
        users = runner.invoke(app, ["users", name])
        assert users.exit_code == 0 and users.stdout.splitlines()[0].split("\t")[:2] == ["name", "role"], users.output
    swept = runner.invoke(app, ["sweep", "ls"])
    assert swept.exit_code == 0 and swept.stdout.splitlines()[0].split("\t")[:3] == ["ID", "NAME", "OWNER"]


def test_every_command_documents_the_same_default_server():
    for cmd in (["run", "--help"], ["top", "--help"], ["trainings", "ls", "--help"], ["session", "ls", "--help"],
                ["gpus", "--help"]):
        said = " ".join(runner.invoke(app, cmd, env={"COLUMNS": "300"}).output.split())
        assert "else this machine's server through its socket" in said, cmd
        assert "default $GPUFLEET_SERVER or http" not in said, cmd


def test_run_without_run_code_is_refused_without_being_told_first_that_its_code_is_ready(tmp_path, monkeypatch,
                                                                                       product_api):
    from gpufleet.trainings.archive import content_hash, pack
    from support.people import bearer, make_people

    settings = make_settings(tmp_path, "sqlite", simulate="4xH100-80GB", auth="on")
    register(settings)
    team = make_people(settings)
    url = product_api(settings)
    project = tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text("print('hello')\n")
    data = pack(project)
    # The same code is already on the server (an admin sent it), so the CLI sends nothing.
    r = httpx.post(f"{url}/api/v1/code", params={"sha256": content_hash(data)}, content=data, timeout=60,
                   headers={**bearer(team.admin), "Content-Type": "application/octet-stream"})
    assert r.status_code in (200, 201), r.text
    monkeypatch.setenv("GPUFLEET_SERVER", url)
    monkeypatch.setenv("GPUFLEET_TOKEN", team.alice)  # a member without run_code
    monkeypatch.chdir(project)
    r = runner.invoke(app, ["run", "--no-follow", "--", "python", "train.py"])
    said = " ".join(r.output.split())
    assert r.exit_code != 0 and "run_code" in said, said
    assert "is on the server already" not in said, said
