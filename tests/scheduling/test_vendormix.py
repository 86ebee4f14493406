"""Mixed vendors and unsupported backends in validate and recommend."""

from __future__ import annotations

from gpufleet.scheduling.recommend import recommend
from gpufleet.scheduling.types import GiB, SelectionRequest
from gpufleet.scheduling.validate import validate_selection
from gpufleet.scheduling.vendormix import mixed_vendor_message, script_mixed_reason, unsupported_backend_reason
from gpufleet.engine.modes import recommended_mode

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


def test_mixed_vendors_are_usable_and_say_the_cost_and_the_mode() -> None:
    f = fleet(host("h", 4, links=pcie_links(4), g2=AMD, g3=AMD))
    v = validate_selection(f, [1, 2])
    assert v.ok and not v.problems  # a mixed set is usable: one gloo process group, engine/parallel.py
    (w,) = [w for w in v.warnings if w.code == "mixed-vendors"]
    assert "GPUs of amd and nvidia in one training" in w.message
    assert "gloo" in w.message and "through host memory" in w.message  # the cost
    assert "gpufleet would use parallel_mode independent" in w.message  # the mode
    assert "every merge_every steps" in w.message
    assert mixed_vendor_message(["amd", "amd"]) is None
    assert not [w for w in validate_selection(f, [2, 3]).warnings if w.code == "mixed-vendors"]


def test_the_recommended_mode_follows_the_set() -> None:
    assert recommended_mode(["nvidia", "nvidia"], ["H100", "H100"]) == "equal"
    assert recommended_mode(["nvidia", "nvidia"], ["H100", "A100"]) == "proportional"
    assert recommended_mode(["nvidia", "amd", "intel"]) == "independent"


def test_recommend_picks_one_vendor_and_says_when_only_a_mixed_set_fits() -> None:
    f = fleet(host("h", 4, links=pcie_links(4), g2=AMD, g3=AMD))
    rec = recommend(SelectionRequest(memory_bytes=GiB, count=2, max_candidates=10), f)
    sets = [c.gpu_indexes for c in rec.candidates]
    assert sets and set(sets) == {(0, 1), (2, 3)}
    rec3 = recommend(SelectionRequest(memory_bytes=GiB, count=3), f)
    assert not rec3.candidates
    why = rec3.wait_reason
    assert "h has 3 free GPUs only across vendors" in why and "gloo" in why
    assert "parallel_mode independent" in why and "name the GPUs (gpu_ids)" in why


def test_a_script_training_stays_on_one_vendor() -> None:
    why = script_mixed_reason(["nvidia", "amd"])
    assert "GPUs of amd and nvidia" in why and "pick GPUs of one vendor" in why
    assert script_mixed_reason(["amd", "amd"]) is None


def test_recommend_skips_gpus_on_unsupported_backends() -> None:
    f = fleet(host("h", 3, g0={"vendor": "apple", "backend": "mps"}))
    rec = recommend(SelectionRequest(memory_bytes=GiB, count=2, max_candidates=10), f)
    assert [c.gpu_indexes for c in rec.candidates] == [(1, 2)]


def test_mixed_models_of_one_vendor_point_to_proportional_shares() -> None:
    f = fleet(host("h", 2, links=pcie_links(2), g1={"name": "NVIDIA A100-SXM4-80GB"}))
    v = validate_selection(f, [0, 1])
    assert v.ok
    (w,) = [w for w in v.warnings if w.code == "mixed-models"]
    assert "parallel_mode proportional" in w.message and "Relative speed" in w.message
    assert not [w for w in v.warnings if w.code == "mixed-vendors"]
