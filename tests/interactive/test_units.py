"""Small pieces of sessions without a worker: statuses, `gpufleet top`'s holder, the launcher's command."""

from __future__ import annotations

import signal
import uuid
from types import SimpleNamespace

from gpufleet.commands.top import _holder
from gpufleet.interactive.launch import SessionSpec, command, session_env
from gpufleet.interactive.view import status_of


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


def test_the_shell_banner_names_the_gpus_not_the_numbering_order() -> None:
    from gpufleet.commands.sessions import visible_gpus

    # The order variable comes first in the environment the server sends; the banner must skip it.
    assert visible_gpus({"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "0,2"}) == "GPUs 0,2"
    assert visible_gpus({"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "HIP_VISIBLE_DEVICES": "1"}) == "GPU 1"
    assert visible_gpus({"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}) == "no GPU"


def test_a_session_that_cannot_start_says_why_with_the_fix() -> None:
    from gpufleet.interactive.launch import why_it_failed

    said = ["Traceback (most recent call last):", '  File "<frozen runpy>", line 189, in _run_module_as_main',
            "/usr/bin/python3: No module named jupyter_server", ""]
    reason = why_it_failed(1, said)
    assert reason.startswith("the session's process exited with 1: /usr/bin/python3: No module named jupyter_server")
    assert "pip install 'gpufleet[sessions]'" in reason and "shell session" in reason
    # Any other failure gives the process's own last words, with no fix it does not need.
    assert why_it_failed(2, ["bind: address in use"]) == "the session's process exited with 2: bind: address in use"
    assert why_it_failed(3, []) == "the session's process exited with 3"


def test_a_notebook_on_a_host_without_jupyter_fails_at_once_naming_the_extra(tmp_path, monkeypatch) -> None:
    import json

    from gpufleet.interactive import launch
    from gpufleet.engine import exitcodes as ec

    monkeypatch.setattr(launch.importlib.util, "find_spec", lambda name, *a: None)  # a host without Jupyter
    spec = SessionSpec(session_id="s3", progress_file=str(tmp_path / "p.jsonl"), workdir=str(tmp_path / "w"),
                       jupyter=True, port=1, token="t")
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        assert launch.run(spec) == ec.CANNOT_RUN
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
    lines = [json.loads(x) for x in (tmp_path / "p.jsonl").read_text().splitlines()]
    error = next(x for x in lines if x["type"] == "error")
    assert error["message"].startswith("No module named jupyter_server on this host: install gpufleet[sessions]")
    assert lines[-1] == {**lines[-1], "type": "end", "status": "failed", "exit_code": ec.CANNOT_RUN}


def test_a_session_is_named_by_its_id_the_start_of_it_or_its_name() -> None:
    import pytest
    import typer

    from gpufleet.commands.sessions import resolve

    ids = [str(uuid.uuid4()) for _ in range(3)]
    rows = [SimpleNamespace(id=ids[0], name="nb", status="stopped"),
            SimpleNamespace(id=ids[1], name="nb", status="running"),
            SimpleNamespace(id=ids[2], name="other", status="running")]
    client = SimpleNamespace(list_sessions=lambda limit: SimpleNamespace(items=rows))
    assert resolve(client, ids[2][:8]) == ids[2]
    assert resolve(client, "other") == ids[2]
    assert resolve(client, "nb") == ids[1]  # of two with one name, the one still running
    with pytest.raises(typer.Exit):
        resolve(client, "nothing-of-that-name")
