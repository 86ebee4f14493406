"""Equal vs speed-proportional micro-batches with one rank at half speed, through the launcher and Trainer.

Two ranks on an NVIDIA + AMD pair of a simulated fleet (CPU ranks, one gloo
process group, as on a real mixed box) train the same ``mlp`` recipe on the
same fixed number of samples; rank 1 runs at half speed (the test hook
``GPUFLEET_TEST_RANK_SPEED=1:0.5``: after its forward and backward it waits as
long again, as a GPU of half the speed would). First ``parallel_mode=equal``
(equal micro-batches), then ``parallel_mode=proportional`` (shares start equal
and are re-tuned from the measured per-rank step times at every checkpoint;
the warm-up counts in its time). Both run the same code path; only the shares
differ. The time is the training loop's (the sum of the step windows the
Trainer reports), not the start-up of the ranks. The two alternate for
``--rounds`` rounds and the medians are compared, so a burst of other load on
a shared machine does not decide the figure. Prints both side by side and the
ratio.

    .venv/bin/python bench/hetero_batches.py [--steps 100] [--global-batch 4096] [--checkpoint-every 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from gpufleet.engine.rankenv import SPEED_ENV


def _run(tmp: Path, mode: str, a: argparse.Namespace) -> tuple[float, list[int] | None]:
    """(seconds the training loop took, the final shares) for one launch."""
    config = {"in_features": a.width, "hidden": [4 * a.width, 4 * a.width], "out_features": a.width,
              "task": "regression", "synthetic_samples": 8 * a.global_batch, "global_batch_size": a.global_batch,
              "max_steps": a.steps, "log_every": a.checkpoint_every, "checkpoint_every": a.checkpoint_every, "lr": 1e-3,
              "parallel_mode": mode}
    run = Path(tempfile.mkdtemp(prefix=f"{mode}-", dir=tmp))
    spec = {"recipe": "mlp", "config": config, "devices": ["cuda:0", "hip:0"], "ranks_on_cpu": True,
            "checkpoint_dir": str(run / "ckpt"), "progress_file": str(run / "progress.jsonl"),
            "collective_timeout_s": 300.0}
    (run / "spec.json").write_text(json.dumps(spec))
    env = {**os.environ, SPEED_ENV: "1:0.5"}
    done = subprocess.run([sys.executable, "-m", "gpufleet.engine.launch", str(run / "spec.json")],
                          env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{mode}: the launcher failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    steps = [json.loads(line) for line in (run / "progress.jsonl").read_text().splitlines()]
    steps = [s for s in steps if s["type"] == "step"]
    seconds, last = 0.0, 0
    for s in steps:
        seconds += (s["step"] - last) * a.global_batch / s["samples_per_s"]
        last = s["step"]
    return seconds, steps[-1].get("rank_shares")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--global-batch", type=int, default=4096)
    ap.add_argument("--width", type=int, default=128, help="the MLP's input width (hidden layers are 4x)")
    ap.add_argument("--checkpoint-every", type=int, default=5, help="where proportional shares are re-tuned")
    ap.add_argument("--rounds", type=int, default=3, help="alternating runs of each; the medians are compared")
    a = ap.parse_args()
    equal: list[float] = []
    prop: list[float] = []
    shares = None
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(a.rounds):
            equal.append(_run(Path(tmp), "equal", a)[0])
            t, shares = _run(Path(tmp), "proportional", a)
            prop.append(t)
    t_equal, t_prop = statistics.median(equal), statistics.median(prop)
    half = a.global_batch // 2
    samples = a.steps * a.global_batch
    print(f"{'shares':<14}{'micro-batches':<18}{'loop s (median)':>16}{'samples/s':>12}  each round (s)")
    print(f"{'equal':<14}{[half, a.global_batch - half]!s:<18}{t_equal:>16.2f}{samples / t_equal:>12.0f}  "
          + " ".join(f"{t:.1f}" for t in equal))
    print(f"{'proportional':<14}{shares!s:<18}{t_prop:>16.2f}{samples / t_prop:>12.0f}  "
          + " ".join(f"{t:.1f}" for t in prop))
    print(f"speed-up (equal / proportional): {t_equal / t_prop:.2f}x for {samples} samples, rank 1 at half speed")


if __name__ == "__main__":
    main()
