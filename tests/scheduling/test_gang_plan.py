"""The gang planner (scheduling/gang.py) on requests as the database holds them."""

from __future__ import annotations

from gpufleet.scheduling.gang import plan


def test_named_hosts_without_a_count_per_host_wait_with_the_reason() -> None:
    # Admission stores gpus_per_host with the names; a row without it is not placed, and says what it lacks.
    parts, why = plan({"a": [0, 1], "b": [0, 1]}, 4, {"host_names": ["a", "b"], "gpus_per_host": None})
    assert parts is None
    assert why == "names hosts a, b but not how many GPUs on each (gpus_per_host)"
