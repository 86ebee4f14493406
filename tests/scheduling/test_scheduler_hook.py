"""The jobs scheduler places a training without gpu_ids through GPU selection."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gpufleet.db.models import Training
from gpufleet.db.session import session_scope, write_session
from gpufleet.devices import simstate
from gpufleet.scheduling.types import GiB

from scheduling.conftest import sample_into_live


@pytest.mark.parametrize("sim_host", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)],
                         indirect=True)
def test_auto_selected_training_gets_a_connected_pair_and_says_why(sim_host) -> None:
    from gpufleet.wire.training_requests import TrainingCreate
    from gpufleet.trainings.service import create_trainings
    from gpufleet.scheduling.scheduler import schedule_pending

    s = sim_host("nvlink-pairs", "4xH100-80GB")
    # Someone else's job on GPU 0: the scheduler's own books still call it free.
    simstate.add_foreign_process(s, 0, 30 * GiB, user="bob")
    sample_into_live(s)
    with write_session(s) as sess:
        (row,) = create_trainings(
            sess, s, [TrainingCreate(name="auto", recipe="mlp", config={"global_batch_size": 64},
                                     world_size=2, distributed=True, host=s.host_name)], "alice")
        tid = row.id
    result = schedule_pending(s)
    # The PostgreSQL database is shared by the session: other queued rows may be placed too.
    assert (tid, s.host_name) in result.scheduled, result.waiting.get(tid)
    with session_scope(s) as sess:
        t = sess.scalar(select(Training).where(Training.id == tid))
        assert sorted(t.gpu_ids) == [2, 3]
        assert t.selection["by"] == "recommend" and "NVLink" in t.selection["reason"]


@pytest.mark.parametrize("sim_host", ["sqlite"], indirect=True)
def test_a_training_that_cannot_be_placed_waits_with_the_reason_in_words(sim_host) -> None:
    from gpufleet.wire.training_requests import TrainingCreate
    from gpufleet.trainings.service import create_trainings
    from gpufleet.scheduling.scheduler import schedule_pending

    s = sim_host("nvlink-pairs", "4xH100-80GB")
    for gpu in (0, 2, 3):
        simstate.add_foreign_process(s, gpu, 30 * GiB, user="bob")
    sample_into_live(s)
    with write_session(s) as sess:
        (row,) = create_trainings(
            sess, s, [TrainingCreate(name="wait", recipe="mlp", config={"global_batch_size": 64},
                                     world_size=2, distributed=True, host=s.host_name)], "alice")
        tid = row.id
    result = schedule_pending(s)
    assert tid in result.waiting
    with session_scope(s) as sess:
        t = sess.scalar(select(Training).where(Training.id == tid))
        assert t.status == "queued" and t.gpu_ids is None
        assert "needs 2 GPUs" in t.wait_reason and "bob" in t.wait_reason, t.wait_reason
