"""The memory estimate's error against memory measured on a real GPU.

    python bench/estimate_accuracy.py [--reference tests/scheduling/data/h200-torch2.11-recipes.jsonl]
    python bench/estimate_accuracy.py --live [--write-reference PATH]      (on a CUDA GPU)

For every case of the reference file (tests/scheduling/data/README.md: an H200, torch 2.11) it
prints the estimate's total beside NVML's measured figure after step 3, and the replayed caching
allocator's reserved peak beside ``max_memory_reserved``, with the signed errors. The baseline
in the same run is the estimate without the allocator's replay and the steady state: the
allocated peak of the first step plus the context, the figure the estimate gave before.

``--live`` measures the same cases on this machine's GPU instead, each in a fresh process
(``scheduling/measured_step.py``), and gives the estimate the context this host's probe
measures, as a worker does; ``--write-reference`` keeps what it measured in the reference
file's format.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

MiB = 2**20
WORKSPACE = 32 * MiB
REFERENCE = Path(__file__).resolve().parents[1] / "tests" / "scheduling" / "data" / "h200-torch2.11-recipes.jsonl"


def reference_cases(path: Path) -> list[dict]:
    return [json.loads(line.removeprefix("REF ")) for line in path.read_text().splitlines() if line.strip()]


def live_cases(cases: list[dict]) -> tuple[list[dict], int]:
    """The reference's cases measured here, and the context this host's probe measures."""
    import pynvml

    from gpufleet.devices.context_probe import probe_one
    from gpufleet.scheduling.measured_step import measure_case

    context = probe_one(pynvml, 0)
    if context is None:
        raise SystemExit("the context probe could not measure GPU 0 (the driver does not report its process)")
    measured = []
    for case in cases:
        said = measure_case(*case["case"])
        if "skip" in said:
            raise SystemExit(said["skip"])
        measured.append(said)
    return measured, context


def main() -> None:
    from gpufleet.scheduling.allocator import device_events, replay
    from gpufleet.scheduling.estimate import estimate_memory_requirement
    from gpufleet.scheduling.memory import plan_trace, trace_for

    ap = argparse.ArgumentParser()
    ap.add_argument("--reference", type=Path, default=REFERENCE)
    ap.add_argument("--live", action="store_true", help="measure the cases on this machine's GPU 0")
    ap.add_argument("--write-reference", type=Path, help="with --live: write what was measured here")
    args = ap.parse_args()
    cases, context = reference_cases(args.reference), None
    if args.live:
        cases, context = live_cases(cases)
        print(f"measured live on {cases[0]['gpu']}, torch {cases[0]['torch']}; context by the probe "
              f"{context / MiB:,.0f} MiB")
        if args.write_reference:
            args.write_reference.write_text("".join(f"REF {json.dumps(c)}\n" for c in cases))
    print(f"{'case':28} {'estimate':>9} {'first-step':>10} {'measured':>9} {'error':>7} {'baseline':>8}"
          f" {'reserved':>9} {'measured':>9} {'error':>7}   (MiB)")
    worst = []
    for case in cases:
        recipe, values, batch, precision = case["case"]
        config = {**values, "global_batch_size": batch, "precision": precision}
        # From the reference file, what its process held outside the allocator; live, the probe's figure.
        outside = context if context is not None else case["step3"]["nvml_minus_reserved"]
        est = estimate_memory_requirement(recipe, config, context_bytes=outside, workspace_bytes=WORKSPACE)
        trace = trace_for(plan_trace(recipe, config, 1, None), None)
        rp = replay(device_events(trace, workspace=WORKSPACE))
        first = trace.step_peaks[0] + outside  # one step, allocated only: the old estimate's shape
        m, mr = case["step3"]["nvml"], case["step3"]["max_reserved"]
        err, base, rerr = (est.total - m) / m, (first - m) / m, (rp.peak_reserved - mr) / mr
        worst.append((err, base))
        name = f"{recipe} {values.get('variant', '')} b{batch} {precision}"
        print(f"{name:28} {est.total / MiB:9,.0f} {first / MiB:10,.0f} {m / MiB:9,.0f} {err:+7.1%} {base:+8.1%}"
              f" {rp.peak_reserved / MiB:9,.0f} {mr / MiB:9,.0f} {rerr:+7.1%}")
    within = sum(1 for e, _ in worst if -0.02 <= e <= 0.05)
    print(f"within -2 %..+5 %: {within} of {len(worst)}; worst under {min(e for e, _ in worst):+.1%} "
          f"(baseline {min(b for _, b in worst):+.1%}); mean |error| {sum(abs(e) for e, _ in worst) / len(worst):.1%}"
          f" vs baseline {sum(abs(b) for _, b in worst) / len(worst):.1%}")


if __name__ == "__main__":
    main()
