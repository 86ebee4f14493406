"""Mixed vendors and unsupported backends in validate and recommend."""

from __future__ import annotations

from gpufleet.scheduling.recommend import recommend
from gpufleet.scheduling.types import GiB, SelectionRequest
from gpufleet.scheduling.validate import validate_selection
from gpufleet.scheduling.vendormix import mixed_vendor_message, unsupported_backend_reason

from scheduling.fleets import fleet, host, pcie_links

AMD = {"vendor": "amd", "backend": "hip", "name": "AMD Instinct MI300X"}


def test_unsupported_backend_is_a_problem_with_its_reason() -> None:
    f = fleet(host("h", 3, g1={"vendor": "apple", "backend": "mps", "name": "Apple M2"},
                   g2={"vendor": "nvidia", "backend": "hip"}))
    v = validate_selection(f, [0, 1, 2])
    assert not v.ok
    bad = {p.gpu_index: p.message for p in v.problems if p.code == "unsupported-backend"}
    assert "backend 'mps' is not one gpufleet trains on (supported: cuda, hip, xpu)" in bad[1]
    assert "backend 'hip' does not belong to vendor 'nvidia'" in bad[2]
    assert unsupported_backend_reason("cuda", "nvidia") is None and unsupported_backend_reason("", "amd") is None
    assert "vendor 'qualcomm'" in unsupported_backend_reason("", "qualcomm")


def test_mixed_vendors_say_the_cost_and_what_to_do() -> None:
    f = fleet(host("h", 4, links=pcie_links(4), g2=AMD, g3=AMD))
    v = validate_selection(f, [1, 2])
    (p,) = [p for p in v.problems if p.code == "mixed-vendors"]
    assert "GPUs of amd and nvidia in one job" in p.message
    assert "gloo" in p.message and "every step" in p.message  # the cost
    assert "pick GPUs of one vendor" in p.message  # what to do
    assert mixed_vendor_message(["amd", "amd"]) is None
    assert validate_selection(f, [2, 3]).ok


def test_recommend_never_mixes_vendors_and_says_why_it_waits() -> None:
    f = fleet(host("h", 4, links=pcie_links(4), g2=AMD, g3=AMD))
    rec = recommend(SelectionRequest(memory_bytes=GiB, count=2, max_candidates=10), f)
    sets = [c.gpu_indexes for c in rec.candidates]
    assert sets and set(sets) == {(0, 1), (2, 3)}
    rec3 = recommend(SelectionRequest(memory_bytes=GiB, count=3), f)
    assert not rec3.candidates
    assert "h has 3 free GPUs only across vendors" in rec3.wait_reason and "gloo" in rec3.wait_reason


def test_recommend_skips_gpus_on_unsupported_backends() -> None:
    f = fleet(host("h", 3, g0={"vendor": "apple", "backend": "mps"}))
    rec = recommend(SelectionRequest(memory_bytes=GiB, count=2, max_candidates=10), f)
    assert [c.gpu_indexes for c in rec.candidates] == [(1, 2)]
