"""The memory estimate's error against memory measured on a real GPU.

    python bench/estimate_accuracy.py [--reference tests/scheduling/data/h200-torch2.11-recipes.jsonl]

For every case of the reference file (tests/scheduling/data/README.md: an H200, torch 2.11) it
prints the estimate's total beside NVML's measured figure after step 3, and the replayed caching
allocator's reserved peak beside ``max_memory_reserved``, with the signed errors. The baseline
in the same run is the estimate without the allocator's replay and the steady state: the
allocated peak of the first step plus the context, the figure the estimate gave before.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

MiB = 2**20
WORKSPACE = 32 * MiB


def main() -> None:
    from gpufleet.scheduling.allocator import device_events, replay
    from gpufleet.scheduling.estimate import estimate_memory_requirement
    from gpufleet.scheduling.memory import plan_trace, trace_for

    ap = argparse.ArgumentParser()
    ap.add_argument("--reference", default=str(Path(__file__).resolve().parents[1] / "tests" / "scheduling"
                                               / "data" / "h200-torch2.11-recipes.jsonl"))
    args = ap.parse_args()
    print(f"{'case':28} {'estimate':>9} {'first-step':>10} {'measured':>9} {'error':>7} {'baseline':>8}"
          f" {'reserved':>9} {'measured':>9} {'error':>7}   (MiB)")
    worst = []
    for line in Path(args.reference).read_text().splitlines():
        case = json.loads(line.removeprefix("REF "))
        recipe, values, batch, precision = case["case"]
        config = {**values, "global_batch_size": batch, "precision": precision}
        outside = case["step3"]["nvml_minus_reserved"]
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
