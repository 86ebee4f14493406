"""What a trace that ran past its budget tells its asker to do: on a busy server the model is seldom the
cause (a newcomer's default example was told to "make the model smaller" on a loaded machine)."""

from __future__ import annotations

from gpufleet.scheduling.memory_pool import over_budget_advice


def test_a_busy_server_says_it_is_busy_and_a_quiet_one_names_the_model():
    busy = over_budget_advice(load=9.5, cores=2)
    assert "the server is busy (load 9.5 on 2 cores)" in busy and "try again" in busy
    assert "smaller" not in busy
    quiet = over_budget_advice(load=0.4, cores=2)
    assert "make it smaller" in quiet and "busy" not in quiet
    assert over_budget_advice()  # this machine's own load, whatever it is
