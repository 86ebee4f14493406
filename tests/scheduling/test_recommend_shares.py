"""The recommendation of a share: where it fits beside the GPU's other holders, and where no share can be held."""

from __future__ import annotations

from gpufleet.scheduling.recommend import recommend
from gpufleet.scheduling.types import GiB, ProcessInfo, Reservation, SelectionRequest

from scheduling.fleets import fleet, host


def test_a_share_is_recommended_beside_the_gpus_other_shares_and_foreign_processes() -> None:
    shared = {"reservations": (Reservation("t1", exclusive=False, reserved_memory=8 * GiB),),
              # A foreign process small enough to leave the GPU shared (not foreign-busy).
              "processes": (ProcessInfo(pid=7, used_memory=GiB // 2, user="bob", foreign=True),),
              "memory_free": 60 * GiB}
    f = fleet(host("a", 1, g0=shared))
    top = recommend(SelectionRequest(10 * GiB, 1, exclusive=False), f).top
    assert top is not None and top.reasons[0] == "fits as a share of 10.0 GiB beside 2 others", top.reasons
    alone = recommend(SelectionRequest(10 * GiB, 1, exclusive=False), fleet(host("b", 1))).top
    assert alone is not None and alone.reasons[0] == "fits as a share of 10.0 GiB alone, for now"
    whole = recommend(SelectionRequest(10 * GiB, 1), fleet(host("b", 1))).top
    assert whole is not None and not any("share" in r for r in whole.reasons)


def test_no_share_is_offered_on_a_gpu_whose_memory_cannot_be_held_in_process() -> None:
    f = fleet(host("x", 1, gpu_name="Intel Data Center GPU Max 1550", g0={"backend": "xpu", "vendor": "intel"}))
    rec = recommend(SelectionRequest(10 * GiB, 1, exclusive=False), f)
    assert rec.top is None
    assert "ask for a whole GPU instead" in rec.wait_reason, rec.wait_reason
    assert recommend(SelectionRequest(10 * GiB, 1), f).top is not None  # whole, it is offered
