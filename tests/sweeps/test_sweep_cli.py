"""`gpufleet sweep start | ls | show | cancel` against a live server (in-process uvicorn, no worker)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from gpufleet.api.app import create_app
from support.fleet import make_settings, register
from support.servers import serve_inprocess

FILE = """\
name: cli-sweep
recipe: mlp
config: {max_steps: 8, global_batch_size: 16}
space:
  lr: {low: 1e-3, high: 1e-1, log: true, count: 3}  # exponents without a dot, as people write them
method: grid
parallel: 2
"""


def test_start_show_ls_and_cancel_from_the_command_line(tmp_path, request, monkeypatch):
    from gpufleet.cli import app

    s = make_settings(tmp_path, "sqlite", request)
    register(s)
    file = tmp_path / "sweep.yaml"
    file.write_text(FILE)
    with serve_inprocess(create_app(s)) as srv:
        monkeypatch.setenv("GPUFLEET_SERVER", srv.url)

        def cli(*args: str):
            return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})

        r = cli("sweep", "start", str(file))
        assert r.exit_code == 0, r.output
        assert "started: 3 trials, 2 at a time" in r.output
        cli("sweep", "cancel", r.output.split()[1])
        # A parallel above the trial count reads as what it means, not "3 trials, 8 at a time".
        file.write_text(FILE.replace("parallel: 2", "parallel: 8"))
        r = cli("sweep", "start", str(file))
        assert r.exit_code == 0 and "started: 3 trials, all at once" in r.output, r.output
        cli("sweep", "cancel", r.output.split()[1])
        file.write_text(FILE)
        r = cli("sweep", "start", str(file), "--json")
        assert r.exit_code == 0, r.output
        sweep = json.loads(r.output)
        assert sweep["status"] == "running" and sweep["total_trials"] == 3 and sweep["method"] == "grid"
        shown = json.loads(cli("sweep", "show", sweep["id"], "--json").output)
        assert {"status", "trials", "best"} <= set(shown) and shown["id"] == sweep["id"]
        assert "cli-sweep" in cli("sweep", "ls").output
        # The start of the ID, as `ls` shows it, names the sweep too.
        assert json.loads(cli("sweep", "show", sweep["id"][:8], "--json").output)["id"] == sweep["id"]
        r = cli("sweep", "cancel", sweep["id"])
        assert r.exit_code == 0 and "cancelled" in r.output
        # A file that is wrong says what to fix, and starts nothing.
        file.write_text(FILE.replace("method: grid", "method: random"))
        r = cli("sweep", "start", str(file))
        assert r.exit_code == 2 and "needs trials" in r.output
        file.write_text("name: [unclosed\n")
        r = cli("sweep", "start", str(file))
        assert r.exit_code == 2 and "not valid YAML" in r.output
        r = cli("sweep", "show", "nope")
        assert r.exit_code == 2 and "no sweep's ID or name matches 'nope'" in r.output
        assert json.loads(cli("sweep", "show", sweep["id"], "--json").output)["status"] == "cancelled"


def test_show_puts_each_stop_s_rung_and_reason_in_the_table(tmp_path, request, monkeypatch):
    import uuid

    from sqlalchemy import select, update

    from gpufleet.cli import app
    from gpufleet.db.models import Training, TrainingMetric
    from gpufleet.db.session import session_scope, write_session
    from gpufleet.sweeps.driver import advance_all

    s = make_settings(tmp_path, "sqlite", request)
    register(s)
    file = tmp_path / "sweep.yaml"
    file.write_text(FILE.replace("parallel: 2", "parallel: 3\nasha: {min_steps: 2, reduction_factor: 2}"))
    with serve_inprocess(create_app(s)) as srv:
        monkeypatch.setenv("GPUFLEET_SERVER", srv.url)

        def cli(*args: str):
            return CliRunner().invoke(app, list(args), env={"COLUMNS": "250"})

        sid = json.loads(cli("sweep", "start", str(file), "--json").output)["id"]
        advance_all(s, force=True)
        with session_scope(s) as sess:
            ids = list(sess.scalars(select(Training.id).where(Training.sweep_id == uuid.UUID(sid))
                                    .order_by(Training.created_at)))
        for tid, loss in zip(ids, (0.2, 0.9)):  # the first at rung 0 goes on, the second (worse) is stopped
            with write_session(s) as sess:
                sess.add(TrainingMetric(training_id=tid, step=2, loss=loss, metrics={}))
                sess.execute(update(Training).where(Training.id == tid).values(status="running", step=2))
            advance_all(s, force=True)
        r = cli("sweep", "show", sid)
        assert r.exit_code == 0, r.output
        [head, *rows] = [line.split("\t") for line in r.output.splitlines()[1:]]  # a pipe gets tab-separated cells
        assert head == ["#", "PARAMS", "STATE", "METRIC", "RUNG", "STEP", "GPU", "TRAINING", "REASON"], r.output
        by_state = {row[2]: dict(zip(head, row)) for row in rows}
        assert by_state["pruned"]["RUNG"] == "0", r.output
        assert by_state["pruned"]["REASON"].startswith("stopped at rung 0 (step 2): its loss 0.9 was not"), r.output
        promoted = [dict(zip(head, row)) for row in rows if "promoted at rung 0" in row[-1]]
        assert [p["RUNG"] for p in promoted] == ["next 1"], r.output
        shown = json.loads(cli("sweep", "show", sid, "--json").output)
        assert [t["rung"] for t in shown["trials"] if t["state"] == "pruned"] == [0]
