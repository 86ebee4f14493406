"""Small pieces of sessions without a worker: statuses, `gpufleet top`'s holder, the launcher's command."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

from gpufleet.commands.top import _holder
from gpufleet.sessions.launch import SessionSpec, command, session_env
from gpufleet.sessions.view import status_of


def _row(status: str, **kw):
    return SimpleNamespace(status=status, cancel_requested=kw.get("cancel", False), reclaim_requested=False)


def _side(**kw):
    return SimpleNamespace(stop_reason=kw.get("stop"), ready_at=kw.get("ready"))


def test_a_sessions_status_follows_its_row_and_why_it_stopped() -> None:
    assert status_of(_row("scheduled"), _side()) == ("queued", None)
    assert status_of(_row("running"), _side()) == ("starting", None)
    assert status_of(_row("running"), _side(ready=1)) == ("running", None)
    assert status_of(_row("running"), _side(ready=1, stop="idle")) == ("stopping", None)
    assert status_of(_row("cancelled"), _side(stop="time_limit")) == ("stopped", "time_limit")
    assert status_of(_row("cancelled"), _side()) == ("stopped", "user")
    assert status_of(_row("failed"), _side()) == ("failed", "failed")


def test_top_names_a_session_as_such() -> None:
    tid = str(uuid.uuid4())
    text = _holder({"job_id": tid, "processes": []}, {tid: {"name": "nb", "owner": "ann", "kind": "session"}})
    assert text.plain == "session nb (ann)"


def test_the_session_process_sees_its_gpus_and_id_and_the_token_stays_off_the_command_line() -> None:
    spec = SessionSpec(session_id="s1", progress_file="/x", workdir="/w", gpu_indexes=[2, 3], jupyter=True,
                       port=8888, token="secret-token", base_url="/sessions/s1/")
    env = session_env(spec, {"PATH": "/bin"})
    assert (env["CUDA_VISIBLE_DEVICES"], env["GPUFLEET_SESSION_ID"], env["JUPYTER_TOKEN"]) == ("2,3", "s1",
                                                                                                 "secret-token")
    argv = command(spec)
    assert "--ServerApp.base_url=/sessions/s1/" in argv and "--ServerApp.ip=127.0.0.1" in argv
    assert not any("secret-token" in a for a in argv)
    shell = SessionSpec(session_id="s2", progress_file="/x", workdir="/w", backend="hip", gpu_indexes=[0])
    assert command(shell) == ["sleep", "infinity"] and session_env(shell, {})["HIP_VISIBLE_DEVICES"] == "0"


def test_the_cli_refuses_bad_options_before_asking_a_server() -> None:
    from typer.testing import CliRunner

    from gpufleet.cli import app

    runner = CliRunner()
    for args, says in ((["--memory", "lots"], "--memory"), (["--hours", "0"], "--hours 0 must be more than 0"),
                       (["--gpus", "0"], "--gpus")):
        r = runner.invoke(app, ["session", "start", *args, "--server", "http://127.0.0.1:9"])
        assert r.exit_code == 2 and says in r.output, (args, r.output)
    r = runner.invoke(app, ["session", "limit", "--max-hours", "3", "--server", "http://127.0.0.1:9"])
    assert r.exit_code == 2 and "exactly one of --user NAME or --group NAME" in r.output, r.output
