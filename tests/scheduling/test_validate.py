"""validate_selection(): every problem of a bad selection, at once."""

from __future__ import annotations

from gpufleet.scheduling.types import GiB, LinkInfo, ProcessInfo, Reservation
from gpufleet.scheduling.validate import validate_selection

from scheduling.fleets import fleet, host


def test_a_bad_selection_lists_every_problem() -> None:
    links = {(0, 1): LinkInfo(4, "PIX", True), (0, 2): LinkInfo(0, "SYS", False),
             (1, 2): LinkInfo(0, "SYS", False), (0, 3): LinkInfo(0, "SYS", True),
             (1, 3): LinkInfo(0, "SYS", True), (2, 3): LinkInfo(0, "PIX", True)}
    f = fleet(host(
        "a100-01", 4, links=links,
        g1={"reservations": (Reservation("t1", training_name="llm", owner="alice"),)},
        g2={"memory_free": 10 * GiB, "vendor": "amd", "name": "AMD Instinct MI210"},
        g3={"processes": (ProcessInfo(pid=99, used_memory=8 * GiB, user="bob"),)},
    ))
    v = validate_selection(f, [0, 1, 1, 2, 3, 7], host="a100-01", memory_bytes=30 * GiB)
    assert not v.ok
    codes = [p.code for p in v.problems]
    assert codes.count("duplicate") == 1
    assert "unknown-gpu" in codes
    assert "busy" in codes and "foreign-busy" in codes
    assert "short-of-memory" in codes and "mixed-vendors" not in codes
    msgs = " | ".join(p.message for p in v.problems)
    assert "GPU 7 does not exist on host a100-01; it has GPUs 0–3" in msgs
    assert "training llm of alice" in msgs
    assert "pid 99" in msgs and "bob" in msgs
    assert "GPU 2 has 10.0 GiB free, 20.0 GiB short of the 30.0 GiB needed" in msgs
    warn = [w.code for w in v.warnings]
    assert "no-peer-access" in warn and "mixed-vendors" in warn


def test_a_good_selection_is_ok_with_no_problems() -> None:
    v = validate_selection(fleet(host("h", 4)), [0, 1], memory_bytes=10 * GiB)
    assert v.ok and v.problems == () and v.host == "h"
    assert v.warnings == ()


def test_pairs_across_sockets_are_a_warning_not_a_problem() -> None:
    v = validate_selection(fleet(host("h", 4)), [0, 2], memory_bytes=GiB)
    assert v.ok
    assert [w.code for w in v.warnings] == ["slow-link"]


def test_host_must_be_named_in_a_fleet_of_several() -> None:
    v = validate_selection(fleet(host("a", 2), host("b", 2)), [0])
    assert not v.ok and "name the host" in v.problems[0].message
    v = validate_selection(fleet(host("a", 2)), [0], host="zz")
    assert "host 'zz' is not in the fleet; known hosts: a" in v.problems[0].message


def test_world_size_never_fits_names_what_the_fleet_has():
    from gpufleet.scheduling.validate import world_size_never_fits

    fleet = {"gpu-a": 4, "gpu-b": 2}
    why = world_size_never_fits(8, fleet)
    assert why is not None and "gpu-a has 4" in why and "gpu-b has 2" in why and "at most 4" in why
    assert world_size_never_fits(4, fleet) is None
    why = world_size_never_fits(3, fleet, host="gpu-b")
    assert why is not None and "host gpu-b, which has 2" in why
    assert world_size_never_fits(2, fleet, host="gpu-b") is None
    # Nothing registered yet, or an unknown host (reported elsewhere): nothing to refuse on.
    assert world_size_never_fits(8, {}) is None
    assert world_size_never_fits(8, fleet, host="gpu-z") is None
