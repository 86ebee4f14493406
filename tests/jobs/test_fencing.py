"""Every write of an attempt is fenced by its attempt number.

An attempt that lost its lease (its worker was killed, a newer attempt
started) writes no checkpoint, no metric and no status.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

from gpufleet.db.models import Training, TrainingMetric
from gpufleet.db.session import session_scope
from gpufleet.jobs.metrics_sink import MetricsSink
from gpufleet.jobs.supervisor import _finish
from gpufleet.lifecycle import outcome
from gpufleet.engine.fence import write_fence
from sqlalchemy import select

from support.fleet import TINY_SAE


def test_a_fenced_launcher_puts_no_checkpoint_in_place(tmp_path):
    ckpt = tmp_path / "ckpt"
    write_fence(ckpt, 2)  # attempt 2 has started
    spec = {"recipe": "sae", "config": dict(TINY_SAE, max_steps=4, checkpoint_every=2), "devices": ["cuda:0"],
            "ranks_on_cpu": True, "checkpoint_dir": str(ckpt), "progress_file": str(tmp_path / "p.jsonl"),
            "attempt": 1}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    r = subprocess.run([sys.executable, "-m", "gpufleet.engine.launch", str(tmp_path / "spec.json")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    assert not list(ckpt.glob("step-*")), list(ckpt.iterdir())
    errors = [json.loads(x) for x in (tmp_path / "p.jsonl").read_text().splitlines() if '"error"' in x]
    assert any("fenced" in e.get("message", "") for e in errors), errors


def test_the_same_attempt_still_checkpoints(tmp_path):
    ckpt = tmp_path / "ckpt"
    write_fence(ckpt, 3)
    spec = {"recipe": "sae", "config": dict(TINY_SAE, max_steps=4, checkpoint_every=2), "devices": ["cuda:0"],
            "ranks_on_cpu": True, "checkpoint_dir": str(ckpt), "progress_file": str(tmp_path / "p.jsonl"),
            "attempt": 3}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    r = subprocess.run([sys.executable, "-m", "gpufleet.engine.launch", str(tmp_path / "spec.json")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads((ckpt / "step-4" / "meta.json").read_text())["attempt"] == 3


def test_a_stale_attempt_writes_no_metric_and_no_status(db_settings, tmp_path):
    tid = uuid.uuid4()
    with session_scope(db_settings) as sess:
        sess.add(Training(id=tid, name="fenced", owner="alice", recipe="sae", config={}, status="running",
                          attempt=2, lease_owner="worker-1"))
    with session_scope(db_settings) as sess:
        stale = sess.get(Training, tid)
        stale.attempt = 1  # what attempt 1's supervisor still holds
        sess.expunge(stale)
    progress = tmp_path / "progress-1.jsonl"
    progress.write_text(json.dumps({"type": "step", "step": 7, "loss": 0.5}) + "\n")
    sink = MetricsSink(db_settings, stale, "worker-1", progress, "h")
    assert sink.pump(final=True) == "lost"
    _finish(db_settings, stale, "worker-1", outcome.Decision("failed", "attempt 1 ended"), 1)
    with session_scope(db_settings) as sess:
        row = sess.get(Training, tid)
        assert row.status == "running" and row.attempt == 2 and row.step in (None, 0)
        assert not sess.execute(select(TrainingMetric).where(TrainingMetric.training_id == tid)).scalars().all()
