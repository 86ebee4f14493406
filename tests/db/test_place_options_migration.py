"""Migration 0019 keeps a Slurm pool written before it working: its partition and account move into the
kind's ``options``, and its jobs' states, in Slurm's words then, become gpufleet's; a downgrade puts both back."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import text

from gpufleet.config import load_settings
from gpufleet.db.session import downgrade_database, get_engine, session_scope, upgrade_database
from gpufleet.db.pools import Pool, PoolJob

BEFORE = "0018_rungs"
NOW = "2026-12-01 10:00:00"


def _old_rows(url: str) -> tuple[uuid.UUID, dict[str, uuid.UUID]]:
    pool, training = uuid.uuid4(), uuid.uuid4()
    jobs = {state: uuid.uuid4() for state in ("PENDING", "RUNNING", "COMPLETED", "NODE_FAIL", "PREEMPTED")}
    engine = get_engine(url)

    def key(u: uuid.UUID) -> uuid.UUID | str:
        return u if engine.dialect.name == "postgresql" else u.hex  # how each stores a Uuid column

    with engine.begin() as conn:
        conn.execute(text("INSERT INTO pools (id, name, kind, partition, account, checkpoint_root, python, "
                          "created_at) VALUES (:id, 'cluster', 'slurm', 'gpu', 'lab', '/shared', '/usr/bin/python3', "
                          ":now)"), {"id": key(pool), "now": NOW})
        conn.execute(text(
            "INSERT INTO trainings (id, name, owner, recipe, config, status, priority, auto_select, exclusive, "
            "restarts, max_restarts, allow_rebalance, attempt, cancel_requested, step, event_seq, created_at, "
            "updated_at, pool) VALUES (:id, 'old', 'alice', 'mlp', '{}', 'running', 0, true, true, 0, 0, false, "
            "5, false, 0, 0, :now, :now, 'cluster')"), {"id": key(training), "now": NOW})
        for n, (state, jid) in enumerate(jobs.items(), start=1):
            conn.execute(text("INSERT INTO pool_jobs (id, training_id, pool_id, attempt, job_id, account, state, "
                              "output, output_offset, submitted_at) VALUES (:id, :t, :p, :n, :job, 'alice', :state, "
                              "'/shared/out', 0, :now)"),
                         {"id": key(jid), "t": key(training), "p": key(pool), "n": n, "job": str(n), "state": state,
                          "now": NOW})
    return pool, jobs


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_a_slurm_pool_from_before_keeps_working_through_the_migration(backend, request, tmp_path) -> None:
    url = request.getfixturevalue("fresh_pg_url") if backend == "postgresql" else None
    s = load_settings(data_dir=tmp_path, **({"database_url": url} if url else {}))
    upgrade_database(s, BEFORE)
    pool_id, jobs = _old_rows(s.effective_database_url)
    upgrade_database(s)
    with session_scope(s) as sess:
        pool = sess.get(Pool, pool_id)
        assert pool.kind == "slurm" and pool.options == {"partition": "gpu", "account": "lab"}
        states = {old: sess.get(PoolJob, jid).state for old, jid in jobs.items()}
    assert states == {"PENDING": "pending", "RUNNING": "running", "COMPLETED": "completed", "NODE_FAIL": "failed",
                      "PREEMPTED": "requeued"}
    downgrade_database(s, BEFORE)
    with get_engine(s.effective_database_url).connect() as conn:
        assert conn.execute(text("SELECT partition, account FROM pools")).one() == ("gpu", "lab")
        back = dict(conn.execute(text("SELECT job_id, state FROM pool_jobs")).all())
    assert back == {"1": "PENDING", "2": "RUNNING", "3": "COMPLETED", "4": "FAILED", "5": "REQUEUED"}
