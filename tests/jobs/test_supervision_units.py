"""The supervisor's pure parts and its database sink, without a launcher (the error table: tests/lifecycle)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from datetime import timedelta

import pytest
from gpufleet.db.models import Training, TrainingEvent, TrainingMetric
from gpufleet.db.session import session_scope, write_session
from gpufleet.db.types import utcnow
from gpufleet.jobs.logs import BoundedLog, read_log
from gpufleet.jobs.metrics_sink import MetricsSink
from gpufleet.trainings.progress import ProgressReader, StragglerWatch
from sqlalchemy import select

def test_straggler_needs_a_sustained_gap():
    w = StragglerWatch(ratio=2.0, patience=3)
    assert w.observe([0.1, 0.1, 0.5]) == []  # one slow step is not a straggler
    assert w.observe([0.1, 0.1, 0.1]) == []
    assert w.observe([0.1, 0.1, 0.5]) == [] and w.observe([0.1, 0.1, 0.5]) == []
    [(rank, t, med)] = w.observe([0.1, 0.12, 0.5])
    assert rank == 2 and t == 0.5 and med == pytest.approx(0.11)
    assert w.observe([0.1, 0.1, 0.5]) == []  # warned once


def test_progress_reader_holds_back_a_partial_line(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text('{"type": "step", "step": 1}\n{"type": "st')
    r = ProgressReader(p)
    assert [x["step"] for x in r.read()] == [1]
    with open(p, "a") as fh:
        fh.write('ep", "step": 2}\nnot json\n')
    assert [x["step"] for x in r.read()] == [2]


def test_log_stays_bounded_and_keeps_the_newest_lines(tmp_path):
    log = BoundedLog(tmp_path / "t.log", max_bytes=4096)
    for i in range(2000):
        log.line(f"line {i:05d}")
    log.close()
    size = (tmp_path / "t.log").stat().st_size
    assert size <= 4096 + 100
    tail = read_log(tmp_path / "t.log", tail=2).text.splitlines()
    assert tail == ["line 01998", "line 01999"]
    head = read_log(tmp_path / "t.log", offset=0).text
    assert head.startswith("[gpufleet:") and "older bytes dropped" in head


def test_sink_writes_metrics_in_batches_warns_about_stragglers_and_sees_cancel(db_settings, tmp_path):
    tid = uuid.uuid4()
    worker = "h:1:abc"
    with session_scope(db_settings) as sess:
        sess.add(Training(id=tid, name="s", owner="o", recipe="sae", config={}, status="running",
                          lease_owner=worker, lease_expires_at=utcnow() + timedelta(seconds=5)))
    progress = tmp_path / "p.jsonl"
    lines = [{"type": "start", "world_size": 2}]
    for s in range(1, 6):
        lines.append({"type": "step", "step": s, "loss": 1.0 / s, "parts": {"l1": 0.1},
                      "rank_step_times": [0.01, 0.09]})
    lines.append({"type": "checkpoint", "step": 4, "path": "/x/step-4"})
    lines.append({"type": "error", "rank": 1, "kind": "error", "message": "RuntimeError: boom"})
    progress.write_text("".join(json.dumps(x) + "\n" for x in lines))
    with session_scope(db_settings) as sess:
        row = sess.get(Training, tid)
    sink = MetricsSink(db_settings, row, worker, progress, "h")
    assert sink.pump() == "ok"
    with session_scope(db_settings) as sess:
        metrics = sess.execute(select(TrainingMetric).where(TrainingMetric.training_id == tid)
                               .order_by(TrainingMetric.step)).scalars().all()
        events = sess.execute(select(TrainingEvent).where(TrainingEvent.training_id == tid)
                              .order_by(TrainingEvent.seq)).scalars().all()
        row = sess.get(Training, tid)
    assert [m.step for m in metrics] == [1, 2, 3, 4, 5] and metrics[0].metrics["l1"] == 0.1
    assert row.step == 5 and row.last_loss == pytest.approx(0.2) and row.last_checkpoint == "/x/step-4"
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    kinds = [e.kind for e in events]
    assert kinds.count("warning") == 1 and "rank 1 is a straggler" in events[kinds.index("warning")].reason
    assert "rank 1: error: RuntimeError: boom" in events[kinds.index("error")].reason
    assert sink.last_error["rank"] == 1
    # Cancel is seen through the lease renewal; a lost lease stops the attempt.
    with write_session(db_settings) as sess:
        sess.get(Training, tid).cancel_requested = True
    sink._last_flush = 0
    assert sink.pump() == "cancel"
    with write_session(db_settings) as sess:
        sess.get(Training, tid).lease_owner = "someone-else"
    sink._last_flush = 0
    assert sink.pump() == "lost"


def test_a_resumed_script_keeps_steps_its_killed_launcher_had_not_merged(db_settings, tmp_path):
    # The worker (and with it the launcher) died after rank 0 reported steps 4 and 5
    # but before the launcher merged them into the progress file.
    tid = uuid.uuid4()
    worker = "h:2:abc"
    with session_scope(db_settings) as sess:
        sess.add(Training(id=tid, name="s", owner="o", recipe="script", config={}, status="running",
                          lease_owner=worker, lease_expires_at=utcnow() + timedelta(seconds=5)))
    earlier = tmp_path / "progress-1.jsonl"
    earlier.write_text("".join(json.dumps({"type": "step", "step": s, "loss": 1.0 / s}) + "\n" for s in (1, 2, 3)))
    (tmp_path / "progress-1.jsonl.report.rank0").write_text("".join(
        json.dumps({"type": "step", "step": s, "loss": 1.0 / s, "parts": {}, "step_time": 0.1}) + "\n"
        for s in range(1, 6)) + '{"type": "step", "st')  # the last line was cut by the kill
    with session_scope(db_settings) as sess:
        row = sess.get(Training, tid)
    MetricsSink(db_settings, row, worker, tmp_path / "progress-2.jsonl", "h").fill_from_earlier([earlier])
    with session_scope(db_settings) as sess:
        steps = sess.execute(select(TrainingMetric.step).where(TrainingMetric.training_id == tid)
                             .order_by(TrainingMetric.step)).scalars().all()
    assert steps == [1, 2, 3, 4, 5]


def test_a_stop_says_whether_it_checkpointed_in_the_grace_and_where_it_resumes():
    import uuid

    from gpufleet.jobs import stops
    from gpufleet.lifecycle import outcome

    interrupted = outcome.Decision("queued", "interrupted; requeued to resume", retry_kind="interrupted")
    worker = stops.Stop("worker", 0.0, "")
    d = stops.decide(worker, interrupted, stopping=True, step=14, host_name="h", max_runtime_s=None,
                     checkpointed=True)
    assert d.status == "queued" and d.retry_kind == "interrupted" and "error" not in d.reason
    assert "it checkpointed at step 14 within the grace" in d.reason and "it will resume from step 14" in d.reason
    # No new checkpoint in the grace: it resumes from an older one, and says so.
    preempt = stops.Stop("preempt", 0.0, "", preempted_by=uuid.UUID(int=7))
    d = stops.decide(preempt, interrupted, stopping=False, step=10, host_name="h", max_runtime_s=None)
    assert d.status == "preempted" and "it wrote no new checkpoint within the grace" in d.reason
    assert "it will resume from step 10" in d.reason
    d = stops.decide(stops.Stop("reclaim", 0.0, ""), interrupted, stopping=False, step=None, host_name="h",
                     max_runtime_s=None)
    assert d.status == "reclaimed" and "will start again from step 0" in d.reason and "trainings resume" in d.reason
    done = outcome.Decision("succeeded", "done")
    assert stops.decide(worker, done, stopping=True, step=3, host_name="h", max_runtime_s=None) is done


def test_an_environment_build_shows_in_the_status_while_it_lasts_and_as_events(db_settings, tmp_path):
    tid, worker = uuid.uuid4(), "h:3:abc"
    with session_scope(db_settings) as sess:
        sess.add(Training(id=tid, name="s", owner="o", recipe="script", config={}, status="running",
                          lease_owner=worker, lease_expires_at=utcnow() + timedelta(seconds=5)))
    with session_scope(db_settings) as sess:
        row = sess.get(Training, tid)
    progress = tmp_path / "progress-1.jsonl"
    sink = MetricsSink(db_settings, row, worker, progress, "h")

    def fed(line: dict) -> Training:
        with open(progress, "a") as fh:
            fh.write(json.dumps({"type": "environment", "key": "k1", **line}) + "\n")
        sink._last_flush = 0
        assert sink.pump() == "ok"
        with session_scope(db_settings) as sess:
            return sess.get(Training, tid)

    building = "building environment (key k1) from requirements.txt with uv"
    assert fed({"phase": "building", "message": building}).status_reason == building
    ready = "environment ready in 3.2 s (built)"
    assert fed({"phase": "ready", "message": ready, "cache_hit": False}).status_reason.endswith(f"; {ready}")
    with session_scope(db_settings) as sess:
        events = sess.execute(select(TrainingEvent).where(TrainingEvent.training_id == tid, TrainingEvent.kind ==
                                                          "environment").order_by(TrainingEvent.seq)).scalars().all()
    assert [e.reason for e in events] == [building, ready] and events[1].data["cache_hit"] is False


def _kind_branches(source: str) -> list[int]:
    """Lines that compare something named ``kind`` with the name of a kind of work."""
    import ast

    names = {"recipe", "script", "session"}
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        named_kind = any((isinstance(s, ast.Attribute) and s.attr.endswith("kind"))
                         or (isinstance(s, ast.Name) and s.id.endswith("kind")) for s in sides)
        constants = {c.value for s in sides for c in ast.walk(s) if isinstance(c, ast.Constant)}
        if named_kind and constants & names:
            found.append(node.lineno)
    return found


def test_the_worker_asks_the_kind_instead_of_branching_on_it() -> None:
    from pathlib import Path

    import gpufleet

    root = Path(gpufleet.__file__).parent
    branches = {f"{p.relative_to(root)}:{line}" for folder in ("jobs", "lifecycle")
                for p in (root / folder).rglob("*.py") for line in _kind_branches(p.read_text())}
    assert sorted(branches) == []
    assert _kind_branches('if t.kind == "script":\n    pass\n') == [1]
    assert _kind_branches('if kind in ("script", "session"):\n    pass\n') == [1]


def test_every_kind_of_work_is_registered_with_its_launcher() -> None:
    from gpufleet.jobs.kinds import WorkKind, register, registered, unregister, work_kind

    assert registered() == ["recipe", "script", "session"]
    launchers = {name: work_kind(name).launcher for name in registered()}
    assert launchers == {"recipe": "gpufleet.engine.launch", "script": "gpufleet.trainings.script_launch",
                         "session": "gpufleet.interactive.launch"}
    assert work_kind("script").oom_refusal and work_kind("recipe").oom_refusal is None
    assert not work_kind("recipe").runs_member_code and work_kind("session").runs_member_code
    try:
        work_kind("notebook")
    except ValueError as exc:
        assert "known: recipe, script, session" in str(exc)
    else:
        raise AssertionError("an unknown kind must be refused")

    # A new kind is its description and one class: registered, it is what the supervisor finds for rows of
    # that kind; a class for a kind no one described is refused.
    from dataclasses import replace

    from gpufleet import workkinds

    class NotebookJob(WorkKind):
        name = "notebook-job"
        launcher = "gpufleet.interactive.launch"

    try:
        register(NotebookJob())
    except workkinds.UnknownKind as exc:
        assert "no kind of work is named 'notebook-job'" in str(exc)
    else:
        raise AssertionError("a kind with no description must be refused")
    workkinds.describe(replace(workkinds.of("session"), name="notebook-job", runs_member_code=False))
    try:
        register(NotebookJob())
        assert work_kind("notebook-job").launcher == "gpufleet.interactive.launch"
        assert work_kind("notebook-job").runs_member_code is False  # read from its description
    finally:
        unregister("notebook-job")
        workkinds.forget("notebook-job")


def test_the_supervisors_annotations_resolve() -> None:
    import typing

    from gpufleet.jobs import supervisor

    # Every name an annotation uses is imported (BoundedLog was not, once).
    for name in ("run_attempt", "_prepare", "_fail_before_launch", "_start", "_decide", "_finish"):
        typing.get_type_hints(getattr(supervisor, name))


def test_every_kinds_launcher_environment_is_built_with_the_training_id(tmp_path: Path) -> None:
    """Each kind's launch_env runs as the supervisor calls it (a merge once dropped its settings argument, and
    every script and session failed at its lease, with no test below the workers' end-to-end ones noticing)."""
    from gpufleet.config import load_settings
    from gpufleet.jobs.isolation import Isolation
    from gpufleet.jobs.kinds import Plan, registered, work_kind

    settings = load_settings(data_dir=tmp_path / "data")
    for name in registered():
        t = Training(id=uuid.uuid4(), name="t", kind=name, recipe="mlp", config={}, world_size=1)
        plan = Plan(Isolation(), tmp_path / "spec.json", tmp_path / "progress.json")
        env = work_kind(name).launch_env(settings, t, plan)
        if env is not None:  # None: the trainings' allow-list, built by the launch itself
            assert env["GPUFLEET_TRAINING_ID"] == str(t.id), name
            assert not any(k.startswith("GPUFLEET_DATABASE") or k == "GPUFLEET_SECRET_KEY" for k in env), name
    assert work_kind("script").launch_env(settings, t, plan) is not None


def test_a_launchers_end_says_who_stopped_it_whatever_its_code() -> None:
    from gpufleet.jobs.logs import launcher_end

    assert launcher_end(0, "the training ended on host a") == "ended: succeeded"
    # Killed by this worker: the reason, never a bare signal number.
    assert launcher_end(-9, "cancel requested") == "ended: stopped by this worker (cancel requested; SIGKILL)"
    # It heard this worker's stop and checkpointed: both what it did and why it was asked.
    assert launcher_end(14, "cancel requested") == ("ended: interrupted (checkpointed on SIGTERM); stopped by this"
                                                    " worker (cancel requested)")
    assert launcher_end(-15).endswith(", not by this worker")
