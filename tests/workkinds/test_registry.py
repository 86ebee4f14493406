"""What each kind of work is, described once, and the layers' steps hung off the same names."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace

import pytest

from gpufleet import workkinds


@pytest.fixture
def job_kind() -> Iterator[str]:
    """A fourth kind, described only: what the layers say of its rows comes from its description."""
    workkinds.describe(replace(workkinds.of("session"), name="batch-job", noun="job", idle_reclaim=True))
    yield "batch-job"
    workkinds.forget("batch-job")


def test_the_three_kinds_are_described() -> None:
    assert workkinds.names() == ["recipe", "script", "session"]
    assert [workkinds.noun(n) for n in workkinds.names()] == ["training", "training", "session"]
    assert workkinds.names(lambda k: k.runs_member_code) == ["script", "session"]
    assert workkinds.names(lambda k: k.idle_reclaim) == workkinds.names(lambda k: k.lists_as_training) \
        == ["recipe", "script"]
    assert workkinds.names(lambda k: k.spans_hosts) == workkinds.names(lambda k: k.mixes_vendors) == ["recipe"]
    # An old row or a client that did not say is called a training.
    assert workkinds.noun(None) == workkinds.noun("") == workkinds.noun("gone") == "training"
    with pytest.raises(workkinds.UnknownKind, match="no kind of work is named 'gone'; known: recipe, script"):
        workkinds.of("gone")


def test_every_described_kind_has_the_workers_class_and_its_places_hooks() -> None:
    from gpufleet.jobs.kinds import registered
    from gpufleet.pools.submit import ON_POOL

    assert registered() == workkinds.names()
    assert sorted(ON_POOL) == workkinds.names(lambda k: workkinds.SLURM in k.places)
    assert workkinds.names(lambda k: workkinds.HOST in k.places) == workkinds.names()


def test_the_request_steps_hang_off_the_kinds_a_training_request_may_name() -> None:
    from typing import get_args

    from gpufleet.trainings.admission.checks import FIELDS
    from gpufleet.trainings.service import PREPARE
    from gpufleet.wire.training_requests import TrainingCreate

    asked = sorted(get_args(TrainingCreate.model_fields["kind"].annotation))
    assert PREPARE.filled() == asked == ["recipe", "script"]
    assert FIELDS.filled() == ["recipe"]  # a script's own fields are read by trainings.script


def test_a_hook_is_only_for_a_described_kind(job_kind: str) -> None:
    slot: workkinds.Hooks[int] = workkinds.Hooks("number")
    with pytest.raises(workkinds.UnknownKind, match="no kind of work is named 'notebook'"):
        slot.add("notebook")
    slot.add("recipe")(1)
    slot.add(job_kind)(2)
    assert slot.of("recipe") == 1 and slot.get("script") is None
    with pytest.raises(workkinds.UnknownKind, match="a training of kind 'script' has no number; the kinds that "
                                                    "have one: batch-job, recipe"):
        slot.of("script")
    workkinds.forget(job_kind)  # its hooks go with its description
    assert slot.filled() == ["recipe"]


def test_a_holders_and_a_notices_noun_come_from_the_description(job_kind: str) -> None:
    from gpufleet.notify.messages import Notice
    from gpufleet.scheduling.availability import assess_gpu
    from gpufleet.scheduling.reservation import GPUState
    from gpufleet.scheduling.types import GPUObservation, Reservation

    tid = uuid.uuid4()
    called = {kind: GPUState(gpu=None, kinds={tid: kind}).holder(tid)  # type: ignore[arg-type]
              for kind in (job_kind, "session", "script")}
    assert called == {job_kind: f"job {tid}", "session": f"session {tid}", "script": f"training {tid}"}
    held = GPUObservation(host="a", index=0, memory_total=2**30, memory_free=2**30,
                          reservations=(Reservation(str(tid), training_name="n", owner="ann", kind=job_kind),))
    assert assess_gpu(held).reason == "reserved exclusively by job n of ann"
    notice = Notice(key="k", event="training_started", time="t",
                    training={"kind": job_kind, "name": "n", "id": str(tid), "owner": "ann"})
    assert notice.as_text() == f"gpufleet: job n ({str(tid)[:8]}) of ann started"


def test_which_events_notify_follows_the_noun(job_kind: str) -> None:
    from gpufleet.notify.events import notification

    assert notification("status", "running", job_kind) == "training_started"  # a job is no session
    workkinds.describe(replace(workkinds.of(job_kind), noun="session"))
    assert notification("status", "running", job_kind) is None
    assert notification("session_ready", "running", job_kind) == "session_ready"
