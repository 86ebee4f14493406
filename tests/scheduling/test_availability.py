"""assess_gpu(): each state, its reason in words, and free memory net of reservations."""

from __future__ import annotations

import pytest

from gpufleet.scheduling.availability import assess_gpu
from gpufleet.scheduling.types import AvailabilityPolicy, GiB, GPUObservation, ProcessInfo, Reservation

BASE = dict(host="h", index=0, name="H100", memory_total=80 * GiB, memory_free=79 * GiB)


def obs(**kw) -> GPUObservation:
    return GPUObservation(**{**BASE, **kw})


def test_idle_gpu_is_free_with_the_device_free_memory() -> None:
    a = assess_gpu(obs())
    assert (a.state, a.free_memory) == ("free", 79 * GiB)
    assert a.usable


def test_foreign_process_over_the_threshold_makes_it_foreign_busy_and_names_it() -> None:
    a = assess_gpu(obs(processes=(ProcessInfo(pid=4242, used_memory=3 * GiB, user="carol", command="python x.py"),)))
    assert a.state == "foreign-busy"
    assert "pid 4242 (python x.py) of carol" in a.reason and "3.0 GiB" in a.reason
    assert a.holders[0]["foreign"] is True and a.holders[0]["user"] == "carol"


def test_small_foreign_process_leaves_it_free_but_counted() -> None:
    a = assess_gpu(obs(memory_free=79 * GiB - 300 * 1024**2,
                       processes=(ProcessInfo(pid=1, used_memory=300 * 1024**2),)))
    assert a.state == "free" and "small foreign processes" in a.reason


def test_sustained_foreign_utilization_is_foreign_busy_but_a_blip_is_not() -> None:
    policy = AvailabilityPolicy(sustained_samples=3, foreign_utilization_threshold=50)
    assert assess_gpu(obs(recent_utilization=(90, 95, 99)), policy).state == "foreign-busy"
    assert assess_gpu(obs(recent_utilization=(90, 10, 99)), policy).state == "free"
    # Our own training's load is not someone else's.
    own = obs(recent_utilization=(90, 95, 99), processes=(ProcessInfo(pid=5, training_id="t1", foreign=False),))
    assert assess_gpu(own, policy).state == "free"


def test_exclusive_reservation_is_busy_and_says_by_whom() -> None:
    a = assess_gpu(obs(reservations=(Reservation("t1", training_name="sae-big", owner="alice"),)))
    assert a.state == "busy" and "training sae-big of alice" in a.reason
    assert a.free_memory == 0


def test_shared_reservations_subtract_only_what_is_not_yet_taken() -> None:
    # t1 reserved 20 GiB and its ranks already hold 15 of them: 5 GiB more will come.
    a = assess_gpu(obs(
        memory_free=64 * GiB,
        reservations=(Reservation("t1", exclusive=False, reserved_memory=20 * GiB),),
        processes=(ProcessInfo(pid=7, used_memory=15 * GiB, training_id="t1", foreign=False),),
    ))
    assert a.state == "shared"
    assert a.free_memory == 59 * GiB
    full = AvailabilityPolicy(max_models_per_gpu=1)
    assert assess_gpu(obs(reservations=(Reservation("t1", exclusive=False),)), full).state == "busy"


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        ({"lost": True}, "fell off the bus"),
        ({"new_xid_errors": 2}, "2 new XID error(s)"),
        ({"new_ecc_errors": 1}, "1 new uncorrected ECC error(s)"),
        ({"status": "missing"}, "not detected"),
        ({"host_offline": True}, "host h is offline"),
    ],
)
def test_unhealthy_wins_over_everything(kw: dict, words: str) -> None:
    a = assess_gpu(obs(drained=True, reservations=(Reservation("t1"),), **kw))
    assert a.state == "unhealthy" and words in a.reason and not a.usable


def test_drained_with_the_operator_reason() -> None:
    a = assess_gpu(obs(drained=True, drain_reason="fan replacement"))
    assert a.state == "drained" and "fan replacement" in a.reason


def test_policy_validates_itself() -> None:
    with pytest.raises(ValueError, match="percentage"):
        AvailabilityPolicy(foreign_utilization_threshold=150)
    with pytest.raises(ValueError, match="sustained_samples"):
        AvailabilityPolicy(sustained_samples=0)


def test_a_gpu_a_session_holds_is_called_held_by_a_session() -> None:
    import uuid
    from types import SimpleNamespace

    from gpufleet.scheduling.reservation import GPUState

    a = assess_gpu(obs(reservations=(Reservation(training_id="t1", training_name="nb-1", owner="alice",
                                                 kind="session"),)))
    assert a.state == "busy" and a.reason == "reserved exclusively by session nb-1 of alice"
    assert a.holders[0]["kind"] == "session"
    trained = assess_gpu(obs(reservations=(Reservation(training_id="t2", training_name="sae", owner="bob"),)))
    assert trained.reason == "reserved exclusively by training sae of bob"
    # The scheduler's wait reason (scheduling/reservation.py) says the same.
    gpu = SimpleNamespace(index=3, enabled=True, drained=False, status="ok")
    nb, run = uuid.uuid4(), uuid.uuid4()
    assert GPUState(gpu, [nb], kinds={nb: "session"}).why_not_exclusive() == f"GPU 3 is held by session {nb}"
    assert GPUState(gpu, [run], kinds={run: "script"}).why_not_exclusive() == f"GPU 3 is held by training {run}"
