"""`gpufleet train` (server path) and `gpufleet trainings ls|show|logs|cancel` against a live server."""

from __future__ import annotations

import pytest
from gpufleet.cli import app
from typer.testing import CliRunner

from support.fleet import make_settings, register

runner = CliRunner()


def test_unreachable_server_and_unknown_training_are_one_line_errors(monkeypatch, tmp_path, live_api):
    r = runner.invoke(app, ["trainings", "ls", "--server", "http://127.0.0.1:9"])
    assert r.exit_code == 2 and "cannot reach the server at http://127.0.0.1:9" in r.output
    settings = make_settings(tmp_path, "sqlite")
    monkeypatch.setenv("GPUFLEET_SERVER", live_api(settings))
    r = runner.invoke(app, ["trainings", "show", "00000000-0000-0000-0000-000000000000"])
    assert r.exit_code == 2 and "does not exist (HTTP 404)" in r.output
    r = runner.invoke(app, ["trainings", "ls", "--status", "sleeping"])
    assert r.exit_code == 2 and "status.0: Input should be 'queued'" in r.output


def test_sharing_options_are_checked_before_anything_is_sent(monkeypatch):
    monkeypatch.setenv("GPUFLEET_SERVER", "http://127.0.0.1:9")
    for args, words in ((["--max-runtime", "0"], "--max-runtime"), (["--priority", "5000"], "--priority")):
        r = runner.invoke(app, ["train", "--recipe", "mlp", *args])
        assert r.exit_code == 2 and words in r.output and "cannot reach" not in r.output, r.output
    r = runner.invoke(app, ["run", "--no-preemptible", "--max-runtime", "-1", "--", "python", "x.py"])
    assert r.exit_code == 2 and "--max-runtime" in r.output, r.output


@pytest.mark.slow
def test_train_submits_follows_and_the_trainings_commands_read_it(monkeypatch, tmp_path, live_api, workers, scheduler):
    settings = make_settings(tmp_path, "sqlite", simulate="1xH100-80GB")
    register(settings)
    workers(settings)
    scheduler(settings)
    monkeypatch.setenv("GPUFLEET_SERVER", live_api(settings))
    r = runner.invoke(app, ["train", "--recipe", "mlp", "--gpu-ids", "0", "--set", "max_steps=3",
                            "--set", "global_batch_size=8", "--set", "log_every=1", "--priority", "2",
                            "--preemptible", "--max-runtime", "600"])
    assert r.exit_code == 0, r.output
    assert "submitted" in r.output and "succeeded" in r.output
    tid = r.output.split("submitted ", 1)[1].split()[0]
    r = runner.invoke(app, ["trainings", "ls", "--status", "succeeded"])
    assert r.exit_code == 0 and tid in r.output
    line = next(x for x in r.output.splitlines() if x.startswith(tid)).split("\t")
    assert line[3] == "succeeded" and line[5] == "0" and line[6] == "3/3"
    r = runner.invoke(app, ["trainings", "show", tid])
    assert r.exit_code == 0 and "succeeded" in r.output and "step-3" in r.output
    assert "priority 2, preemptible" in r.output
    assert "events: all " in r.output or "events: the newest 10 of " in r.output, r.output
    r = runner.invoke(app, ["trainings", "show", tid, "--events", "2"])
    assert r.exit_code == 0 and "events: the newest 2 of " in r.output and "(--events 0 lists all)" in r.output
    assert len([x for x in r.output.splitlines() if x.lstrip().startswith("#")]) == 2, r.output
    r = runner.invoke(app, ["trainings", "logs", tid])
    assert r.exit_code == 0 and "ended: succeeded" in r.output
    r = runner.invoke(app, ["trainings", "cancel", tid])
    assert r.exit_code == 0 and f"{tid}: succeeded" in r.output


def test_train_names_the_host_name_and_priority_on_a_fleet_of_several_hosts(monkeypatch, tmp_path, live_api):
    a = make_settings(tmp_path, "sqlite", host_name="host-a")
    b = a.model_copy(update={"host_name": "host-b"})
    register(a)
    register(b)
    url = live_api(a)
    monkeypatch.setenv("GPUFLEET_SERVER", url)
    base = ["train", "--recipe", "mlp", "--gpu-ids", "0", "--set", "max_steps=3", "--no-follow"]
    r = runner.invoke(app, base)
    assert r.exit_code == 2 and "--gpu-ids are per host; say which host (host-a, host-b)" in r.output, r.output
    r = runner.invoke(app, [*base, "--host", "host-b", "--name", "on-b", "--priority", "7"])
    assert r.exit_code == 0, r.output
    tid = r.output.split("submitted ", 1)[1].split()[0]
    import httpx

    shown = httpx.get(f"{url}/api/v1/trainings/{tid}", timeout=10).json()
    assert (shown["name"], shown["priority"], shown["requested_host"]) == ("on-b", 7, "host-b"), shown
    r = runner.invoke(app, ["train", "--local", "--recipe", "mlp", "--devices", "cpu", "--host", "host-b"])
    assert r.exit_code == 2 and "--local runs here" in " ".join(r.output.split())


def test_train_gpus_lets_the_server_choose_and_from_takes_a_name(monkeypatch, tmp_path, live_api):
    import httpx

    settings = make_settings(tmp_path, "sqlite", simulate="4xH100-80GB")
    register(settings)
    url = live_api(settings)
    monkeypatch.setenv("GPUFLEET_SERVER", url)
    # The server's first estimate of a recipe traces it (seconds on a loaded machine): done before the CLI's.
    src = httpx.post(f"{url}/api/v1/trainings", json={"name": "first", "recipe": "mlp"}, timeout=300).json()
    r = runner.invoke(app, ["train", "--recipe", "mlp", "--gpus", "2", "--name", "two", "--no-follow"])
    assert r.exit_code == 0, r.output
    tid = r.output.split("submitted ", 1)[1].split()[0]
    shown = httpx.get(f"{url}/api/v1/trainings/{tid}", timeout=10).json()
    assert (shown["world_size"], shown["auto_select"], shown["gpu_ids"]) == (2, True, None), shown
    r = runner.invoke(app, ["train", "--recipe", "mlp", "--from", "first", "--set", "lr=0.01", "--no-follow"])
    assert r.exit_code == 0, r.output
    clone = r.output.split("submitted ", 1)[1].split()[0]
    assert httpx.get(f"{url}/api/v1/trainings/{clone}", timeout=10).json()["resumed_from"] == src["id"]
    r = runner.invoke(app, ["train", "--recipe", "mlp", "--gpus", "2", "--gpu-ids", "0"])
    assert r.exit_code == 2 and "--gpus asks a server to choose" in r.output


def test_what_a_member_wrote_reaches_a_terminal_as_written_never_as_markup(tmp_path, live_api):
    """A training's name is a member's words, shown in everyone's `trainings ls` and `show`. Console
    markup in it must stay those characters: not a link planted in an admin's terminal, not a hidden word."""
    import httpx

    from support.terminal import in_terminal

    settings = make_settings(tmp_path, "sqlite", simulate="1xH100-80GB")
    register(settings)
    url = live_api(settings)
    name = "[link=https://evil.example]pay-here[/link] [bold red]urgent[/]"
    r = httpx.post(f"{url}/api/v1/trainings", json={"name": name, "recipe": "mlp", "memory_mb": 1024,
                                                    "config": {"max_steps": 3}}, timeout=30)
    assert r.status_code == 201, r.text
    env = {"GPUFLEET_SERVER": url}
    import os

    env = {**os.environ, **env}
    for args in (["trainings", "ls", "--wide"], ["trainings", "show", r.json()["id"]]):
        shown = in_terminal(args, env=env, cols=250)
        assert name in shown, shown
        assert "\x1b]8;" not in shown  # no hyperlink was drawn
