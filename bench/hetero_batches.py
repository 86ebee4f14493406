"""Equal vs speed-proportional micro-batches with one rank at half speed.

Two gloo CPU ranks train the same model on the same fixed number of samples;
rank 1 is slowed to half speed by the test hook (``GPUFLEET_TEST_RANK_SPEED``).
First with equal shares (512/512 of a global 1024), then with shares re-tuned
from the step times measured in a short warm-up (what the trainer does at a
checkpoint boundary). Prints both wall times side by side and the ratio.

    .venv/bin/python bench/hetero_batches.py [--steps 20] [--global-batch 1024]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from gpufleet.training.distributed import find_free_port
from gpufleet.training.hetero import SPEED_ENV, proportional_shares, rank_slices, retune_shares, slow_rank_hook, weighted_step

D = 512


def _loss(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return ((model(x) - x) ** 2).mean()


def _run(model: torch.nn.Module, opt: torch.optim.Optimizer, data: torch.Tensor, shares: list[int], rank: int,
         steps: int, global_batch: int) -> tuple[float, float]:
    """(wall seconds, this rank's mean local seconds per step) for ``steps`` steps."""
    hook = slow_rank_hook(rank)
    local: list[float] = []

    def done(seconds: float) -> None:
        t = time.perf_counter()
        if hook is not None:
            hook(seconds)
        local.append(seconds + time.perf_counter() - t)  # what this rank's share cost, slow-down included

    mine = rank_slices(shares)[rank]
    dist.barrier()
    t0 = time.perf_counter()
    for step in range(steps):
        batch = data[(step % 8) * global_batch:(step % 8 + 1) * global_batch]
        weighted_step(model, opt, _loss, batch[mine], global_batch, on_local_done=done)
    dist.barrier()
    return time.perf_counter() - t0, sum(local) / len(local)


def _rank(rank: int, port: int, steps: int, global_batch: int, out: str) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(D, 4 * D), torch.nn.Tanh(), torch.nn.Linear(4 * D, D))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        data = torch.randn(8 * global_batch, D, generator=torch.Generator().manual_seed(1))
        equal = proportional_shares([1, 1], global_batch)
        t_equal, _ = _run(model, opt, data, equal, rank, steps, global_batch)
        # Warm-up on equal shares, then re-tune from the measured per-rank step times.
        _, mean_local = _run(model, opt, data, equal, rank, 6, global_batch)
        times = [torch.zeros(1) for _ in range(2)]
        dist.all_gather(times, torch.tensor([mean_local]))
        tuned = retune_shares(equal, [float(t) for t in times], gain=1.0)
        t_prop, _ = _run(model, opt, data, tuned, rank, steps, global_batch)
        if rank == 0:
            with open(out, "w") as f:
                f.write(f"{equal} {t_equal} {tuned} {t_prop}\n")
    finally:
        dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--global-batch", type=int, default=1024)
    a = ap.parse_args()
    os.environ[SPEED_ENV] = "1:0.5"
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result")
        mp.start_processes(_rank, args=(find_free_port(), a.steps, a.global_batch, out), nprocs=2,
                           start_method="spawn")
        with open(out) as f:
            eq_s, teq, pr_s, tpr = _parse(f.read().strip())
    samples = a.steps * a.global_batch
    print(f"{'shares':<14}{'micro-batches':<18}{'wall s':>10}{'samples/s':>12}")
    print(f"{'equal':<14}{eq_s:<18}{teq:>10.2f}{samples / teq:>12.0f}")
    print(f"{'proportional':<14}{pr_s:<18}{tpr:>10.2f}{samples / tpr:>12.0f}")
    print(f"speed-up (equal / proportional): {teq / tpr:.2f}x for {samples} samples, rank 1 at half speed")


def _parse(text: str) -> tuple[str, float, str, float]:
    a, rest = text.split("] ", 1)
    t1, rest = rest.split(" ", 1)
    b, t2 = rest.rsplit("] ", 1)
    return a + "]", float(t1), b + "]", float(t2)


if __name__ == "__main__":
    main()
